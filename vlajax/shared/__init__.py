"""Small utilities every layer uses: whole-file writes, the tools' command line, the compile
cache, intervals, image resize-with-pad. Nothing here imports the rest of vlajax."""
