"""`python -m adapter`: the same as the `gpu-pulse-adapter` console script."""

import sys

from adapter.cli import main

sys.exit(main())
