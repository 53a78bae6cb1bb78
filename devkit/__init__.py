"""The dev environment: what makes a laptop a lab for the `teamdesk` product.

Embedded servers from wheels and their watchdog (`devkit.services`), the JupyterLab
launcher (`devkit.lab`) with the learner's own notebook copies (`devkit.copies`), the
read-only contents manager (`devkit.contents`) and the Jupyter settings every way into the
lab loads (`devkit.jupyter_settings`), a class's JupyterHub (`devkit.hub`), the rules index
(`devkit.rules`), the course website (`devkit.site`) and the dev environment's `teamdesk`
commands (`devkit.cli`). It uses the product (`teamdesk`) and never the lab harness
(`labs`); the product imports nothing of it.
"""
