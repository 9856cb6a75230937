"""A job's configuration, resolved: the schema ``conf/`` composes onto (``schema``), the one
typed ``Job`` a composed config becomes (``job``), the branches of an ablation (``branch``), the
command-line check (``preflight``) and whether a run can report to W&B (``wandb_check``).
Imports neither torch nor Lightning."""
