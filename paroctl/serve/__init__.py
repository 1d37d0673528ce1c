"""Where and how a serve runs: layout, argv, engine, renders, runtimes, Kubernetes, CPU."""
