from lmbridge.cli import main

raise SystemExit(main())
