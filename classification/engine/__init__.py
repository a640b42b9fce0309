"""The classification training engine, and the engine pieces detection shares: multi-process launch (launch.py),
Slurm submission (slurm.py) and the command-line conventions (cli.py)."""
