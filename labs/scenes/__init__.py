"""Scene helpers, one module per notebook (story in the cells, machinery
out of sight). A module here holds what its notebook needs to *stage* a scene or judge an
exercise, but what a learner need not read to follow the chapter: the cells call it in
one line and keep the story (the gates, the writes, the checks) in view. Each module is
named after its notebook (`ch26c` for `26c-reminder-commit-gate.ipynb`) and takes the lab
as its first argument, so it works for whichever lab the notebook has open.
"""
