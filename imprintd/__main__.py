from imprintd.cli import main

raise SystemExit(main())
