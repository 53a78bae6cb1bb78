"""`labs.scenes.ch90` (notebook 90): the run's view is a short table with the whole log
folded; `worker_children` sees a live worker process of ours and forgets it once it
exited. Real PostgreSQL, Redis and a real `teamdesk worker`
process. The exercise and the case are tested in `test_exercises_ch90.py`, the in-flight
strikes and the lease clobber in `test_chaos_inflight.py`."""

from __future__ import annotations

from labs.chaos import ChaosReport, make_schedule
from labs.procs import WorkerProc
from labs.scenes import ch90


def test_the_run_view_is_a_table_with_the_log_one_click_away():
    """Two lines and one row per scheduled fault; the log's lines only inside a closed
    `<details>`, escaped, without the temporary worker-log folder."""
    config = ch90.CONFIG
    schedule = make_schedule(config.seed, config.workers, config.duration, config.kinds)
    report = ChaosReport(config=config, schedule=schedule)
    lines = [f"line {i} <{i}>" for i in range(40)] + ["  worker logs: /tmp/teamdesk-chaos-x"]
    view = ch90.RunView(report, lines, 12.0)
    html = view._repr_html_()
    head, _, folded = html.partition("<details>")
    assert "line 0" not in head and "inconclusive" in head
    assert head.count("</tr>") == len(schedule) + 1  # the header and one row per fault
    assert "line 39 &lt;39&gt;" in folded and "worker logs" not in folded
    assert "<details open" not in html
    assert len(repr(view).splitlines()) == 2 + 1 + len(schedule) + 1


async def test_worker_children_sees_a_live_worker_only(lab, tmp_path):
    """A chaos run must leave no worker process behind: a running `teamdesk worker` of this
    process is listed, and no longer once it has stopped."""
    w = WorkerProc(lab.settings, "wx", tmp_path, {})
    w.start()
    try:
        assert w.pid in {p.pid for p in ch90.worker_children()}
    finally:
        await w.stop(30)
    assert w.pid not in {p.pid for p in ch90.worker_children()}
