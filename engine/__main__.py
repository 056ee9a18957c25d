import sys

from engine.run import main

sys.exit(main())
