"""The main job: the paper's Tables 7/8 question in miniature -- pretrain, transfer, compare, report -- above both
pipelines (it runs tools/train_cls.py and tools/train_det.py as stages and reads their run files).

    plan.py      what runs: MainJobPlan, the stages (Stage) and their commands
    presets.py   the named budgets of a plan (--preset)
    data.py      the data it runs on: the embedded default, an ImageNet-style folder, COCO / VOC files
    data_identity.py  what the stages read, by content: a rerun on changed data refused naming it
    data_scale.py     --scale data: the paper configs' detector at the data's size and an epoch schedule
    checks.py    what is checked of a plan before anything runs (options, fair arms, loadable checkpoints)
    options.py   tools/main_job.py's options -> a MainJobPlan
    graph.py     running the stage graph here (run_graph) or on Slurm (submit_graph); stage records
    leg.py       one leg as a harness (config, model, optimizer, loader, step): estimates and benchmarks
    results.py   the numbers read from the runs (JobResults), the summary and the report's notes
    compare.py   two runs of the job side by side (tools/compare_jobs.py)
    paper_cost.py  the same comparison's cost at the paper's scale (an estimate from mult-adds)
    dry_run.py   what --dry-run prints
    cli.py       tools/main_job.py
"""
