"""The matcher's groups evaluated in batches (``batched``): groups whose compiled expressions
differ only in constants are rows of one ``Batch``, and a pilot's answers for a batch are kept
and evaluated again only for the rows added since, as DIRAC's TaskQueueDB matches on indexed
columns (Hasham 2011 §IV-E).  The other groups are "loose": the matcher evaluates them one at a
time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from glidein_ext.tq.service.matching import batched, classad_parse, classad_values, columns
from glidein_ext.tq.service.matching.match_groups import MatchGroup


@dataclass
class Evaluated:
    """A batch's answers for one pilot: rows evaluated, which matched, and their Ranks of it."""

    epoch: int
    rows: int
    matched: Any  # numpy bool array: both Requirements hold
    task_rank: Any  # numpy float array: the group's Rank of the pilot
    pilot_rank: Any  # numpy float array: the pilot's Rank of the group


_MISSING = Evaluated(-1, 0, None, None, None)
Ranked = tuple[tuple[float, float, int, int], str, float, float]


class Batches:
    """The batches by template, the loose groups, and per pilot its side and answers."""

    def __init__(self) -> None:
        # Groups evaluated together (``batched``), by template; the others ("loose").
        self.by_template: dict[tuple[Any, ...], batched.Batch] = {}
        self._batch_ids = itertools.count()
        self.loose: set[str] = set()
        # Per pilot: its Requirements and Rank as trees over the groups' rows
        # (``batched.mirrored``; None: not compiled, batches do not apply); per batch, the
        # groups' answers for it (None: not batchable for this pilot).
        self.pilot_side: dict[int, tuple[classad_parse.Node, classad_parse.Node] | None] = {}
        self._verdicts: dict[int, dict[int, Evaluated | None]] = {}

    def place(self, key: str, group: MatchGroup) -> None:
        """Put a new group in the batch of its template, or among the loose ones."""
        if group.costly or group.requirements is None or group.rank is None:
            self.loose.add(key)
            return
        params: list[classad_values.Value] = []
        requirements = batched.template(group.requirements.tree, group.values, params)
        rank = batched.template(group.rank.tree, group.values, params)
        if requirements is None or rank is None:
            self.loose.add(key)
            return
        kinds = [columns.kind_of(value) for value in params]
        shape = (requirements, rank, tuple(kinds))
        batch = self.by_template.get(shape)
        if batch is None:
            batch = self.by_template[shape] = batched.Batch(
                next(self._batch_ids), requirements, rank, kinds
            )
        spec = group.spec
        resources = (spec.request_cpus, spec.request_memory, spec.request_disk, spec.max_runtime)
        group.batch, group.row = batch, batch.add(key, params, resources, group.values)

    def unplace(self, key: str, group: MatchGroup) -> dict[str, int]:
        """Take a group out (its last task left); the new rows of groups that moved."""
        batch = group.batch
        if batch is None:
            self.loose.discard(key)
            return {}
        batch.kill(group.row)
        if batch.live == 0:
            del self.by_template[(batch.requirements, batch.rank, tuple(batch.kinds))]
            for answers in self._verdicts.values():
                answers.pop(batch.ident, None)
        elif batch.wants_compaction():
            return batch.compact()
        return {}

    def add_pilot(
        self, pilot_id: int, side: tuple[classad_parse.Node, classad_parse.Node] | None
    ) -> None:
        self.pilot_side[pilot_id] = side
        self._verdicts[pilot_id] = {}

    def remove_pilot(self, pilot_id: int) -> None:
        self.pilot_side.pop(pilot_id, None)
        self._verdicts.pop(pilot_id, None)

    def answers(
        self, pilot_id: int, batch: batched.Batch, values: classad_values.Ad
    ) -> tuple[Evaluated | None, int]:
        """The batch's groups' answers for this pilot (its plain attributes ``values``),
        evaluated for rows added since (None: the template is not batchable for it); and how
        many rows were evaluated now."""
        answers = self._verdicts[pilot_id]
        found = answers.get(batch.ident, _MISSING)
        rows = len(batch)
        if found is None:
            return None, 0
        if found is _MISSING or found.epoch != batch.epoch:
            start = 0
        elif found.rows < rows:
            start = found.rows
        else:
            return found, 0
        side = self.pilot_side[pilot_id]
        assert side is not None
        try:
            matched, task_rank = batch.evaluate(values, start, rows)
            pilot_matched, pilot_rank = batch.evaluate_pilot(side[0], side[1], start, rows)
        except columns.Unbatchable:
            answers[batch.ident] = None
            return None, 0
        matched &= pilot_matched
        if start:
            matched = np.concatenate([found.matched[:start], matched])
            task_rank = np.concatenate([found.task_rank[:start], task_rank])
            pilot_rank = np.concatenate([found.pilot_rank[:start], pilot_rank])
        found = Evaluated(batch.epoch, rows, matched, task_rank, pilot_rank)
        answers[batch.ident] = found
        return found, rows - start

    def ordered(
        self, pilot_id: int, values: classad_values.Ad, limits: tuple[float, float, float, float]
    ) -> tuple[list[Iterator[Ranked]] | None, list[str], int]:
        """For a pilot with a side: each batch's groups that match it and fit ``limits``, best
        first (``Batch.ordered``); the keys of the groups in batches not batchable for it; and
        how many rows were evaluated now.  None instead of the orderings where a Rank is NaN
        (the matcher then orders every group one by one)."""
        sources: list[Iterator[Ranked]] = []
        extra: list[str] = []
        evaluated = 0
        for batch in self.by_template.values():
            answers, count = self.answers(pilot_id, batch, values)
            evaluated += count
            if answers is None:
                extra.extend(key for key in batch.keys if key is not None)
                continue
            rows = batch.candidates(answers.matched, limits)
            if np.isnan(answers.task_rank[rows]).any() or np.isnan(answers.pilot_rank[rows]).any():
                return None, extra, evaluated
            sources.append(batch.ordered(rows, answers.task_rank, answers.pilot_rank))
        return sources, extra, evaluated
