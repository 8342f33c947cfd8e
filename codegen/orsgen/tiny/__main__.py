from orsgen.tiny.command import main

raise SystemExit(main())
