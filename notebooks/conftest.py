"""nbval settings for the chapter notebooks.

Stored outputs are compared as text; HTML (pandas' table markup churns across versions),
JavaScript and stderr are skipped. Correctness rests on each notebook's assertion cells.
The hook is guarded with `hasattr` so other notebook runners (e.g. nbmake) do not crash.
"""


def pytest_collectstart(collector):
    if hasattr(collector, "skip_compare"):
        collector.skip_compare += ("text/html", "application/javascript", "stderr",
                                   "image/png", "application/vnd.jupyter.widget-view+json")
