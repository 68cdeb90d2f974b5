"""vlajax."""
