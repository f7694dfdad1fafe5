"""`python -m oberik ...` runs the same command line as `oberik ...`."""

import sys

from oberik.cli import main

sys.exit(main())
