"""Training engine shared by classification and detection: multi-process launch and Slurm submission."""
