"""Lab worlds a judge opens for itself, in one way: each is a `Lab.open(...)` of its own,
closed whatever happened and, where a learner's code ran, without checking its errors (they
are the learner's code's, or the bug under test's, and the verdict speaks of them).

- `own_world(name, ...)`: the world, for a run that reports its own outcome (a learner's
  test, `labs.exercises.run_test`);
- `fresh_world(name, notes, ...)`: the same, for one judged run whose bounded wait may
  run out: that ends the run with a note instead of an error in the learner's cell;
- `world_context(name, make, ...)`: an exercise's context outside a notebook
  (`labs.exercises.Exercise.context`): a world of its own and what the check cell would
  pass, made in it; this one is closed with its errors checked;
- `register_cases(CASES)`: a scene module's diagnosis cases as exercises, each staged in
  a world of its own (`labs.cases`, which sits below the lab and cannot open one).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import psycopg

from labs.cases import CaseSpec, open_case
from labs.exercises import REGISTRY, Context, stopped_note
from labs.lab import Lab
from teamdesk.config import Settings

#: What a check cell passes to a judge, made in a world (`world_context`).
Make = Callable[[Lab], Awaitable[dict[str, Any]]]


async def resolved(settings: Settings | None) -> Settings:
    """`settings` with the servers' URLs resolved once (`devkit.services`), so that the
    worlds a judge opens side by side do not each ask the embedded servers again."""
    from devkit import services

    return await asyncio.to_thread(services.resolve_settings, settings)


@contextlib.asynccontextmanager
async def own_world(name: str, *, settings: Settings | None = None, check: bool = False,
                    **open_kw: Any) -> AsyncIterator[Lab]:
    """A lab world of its own (`Lab.open(name, settings=..., …)`), closed whatever
    happened, its errors returned, not raised (`close(check=False)`), unless `check`: a
    world the harness stages by itself (`world_context`) must end without an error nobody
    acknowledged, since no learner's code ran in it to explain one. In a kernel,
    opening a lab closes an open one of the same name: worlds open side by side need a
    name each."""
    lab = await Lab.open(name, settings=settings, **open_kw)
    try:
        yield lab
    finally:
        await lab.close(check=check)


@contextlib.asynccontextmanager
async def fresh_world(name: str, notes: list[str], *, settings: Settings | None = None,
                      **open_kw: Any) -> AsyncIterator[Lab]:
    """`own_world` for one judged run: a bounded wait that ran out, or the database
    refusing, ends the run with a note in `notes` (`stopped_note`) instead of an error in
    the learner's cell; the verdict then says what did not happen."""
    async with own_world(name, settings=settings, **open_kw) as lab:
        try:
            yield lab
        except (AssertionError, TimeoutError, psycopg.Error) as err:
            notes.append(stopped_note(err))


async def _the_lab(lab: Lab) -> dict[str, Any]:
    return {"lab": lab}


def world_context(name: str, make: Make = _the_lab, **open_kw: Any) -> Context:
    """An exercise's context outside a notebook: a world of its own (`own_world(name,
    **open_kw)` on the suite's settings, its errors checked at close) and the check
    cell's keywords, `make(lab)` (by default `lab=`)."""

    @contextlib.asynccontextmanager
    async def context(settings: Settings) -> AsyncIterator[dict[str, Any]]:
        async with own_world(name, settings=settings, check=True, **open_kw) as lab:
            yield await make(lab)

    return context


async def _staged(name: str, lab: Lab) -> dict[str, Any]:
    return {"case": await open_case(lab, name)}


def register_cases(cases: Mapping[str, CaseSpec]) -> None:
    """Register each of a scene module's diagnosis cases as exercise `case.<name>`
    (`CaseSpec.exercise`), its context outside a notebook the case staged in a world of
    its own."""
    for spec in cases.values():
        found = spec.exercise(world_context(f"case-{spec.name}",
                                            functools.partial(_staged, spec.name)))
        REGISTRY.setdefault(found.key, found)  # a name used twice: `labs.cases.declared`
