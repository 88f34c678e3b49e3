import sys

from report.cli import main

sys.exit(main())
