import sys

from trainctl.cli import main

sys.exit(main())
