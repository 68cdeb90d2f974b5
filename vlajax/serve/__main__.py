"""`python -m vlajax.serve --checkpoint DIR`: see `vlajax.serve.app`."""

import sys

from vlajax.serve.app import main

if __name__ == "__main__":
    sys.exit(main())
