"""The scheduler's live requests by exact rid, and the samples each ``n > 1`` request spawned."""

from __future__ import annotations

from radixlm.runtime.scheduler.req import Req


class RequestIndex:
    """Every request between arrival and finish, by rid; samples listed under their parent's rid.

    An abort resolves here: the request with exactly that rid, plus the samples registered under it
    as parent. No prefix or pattern is ever matched.
    """

    def __init__(self) -> None:
        self._by_rid: dict[str, Req] = {}
        self._samples: dict[str, list[Req]] = {}

    def __len__(self) -> int:
        return len(self._by_rid)

    def add(self, req: Req) -> None:
        self._by_rid[req.rid] = req
        if req.group_rid is not None:
            self._samples.setdefault(req.group_rid, []).append(req)

    def forget(self, req: Req) -> None:
        """Drop ``req`` (finished or dropped); unknown requests are ignored."""
        if self._by_rid.get(req.rid) is req:
            del self._by_rid[req.rid]
        group = req.group_rid
        if group is None or group not in self._samples:
            return
        siblings = [r for r in self._samples[group] if r is not req]
        if siblings:
            self._samples[group] = siblings
        else:
            del self._samples[group]

    def named(self, rid: str) -> list[Req]:
        """The live request whose rid is ``rid`` and every live sample it spawned."""
        own = self._by_rid.get(rid)
        return ([own] if own is not None else []) + list(self._samples.get(rid, ()))
