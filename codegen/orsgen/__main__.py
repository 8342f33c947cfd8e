from orsgen.cli import main

raise SystemExit(main())
