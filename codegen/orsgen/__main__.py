from orsgen.command import main

raise SystemExit(main())
