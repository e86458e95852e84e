"""What a 5.x controller's traffic tells, per broker group: its elections (masterEpoch), its
syncStateSet changes, the brokers' ids and addresses, and which brokers it heard (heartbeats).

Built from the decoding tasks' notes (decode/controller.py), at the endpoints found to be
controllers. Only the controller's own answers (SUCCESS) say what it decided; a broker's
heartbeat carrying masterEpoch N says only that N existed by then (a broker learns an epoch from
the controller). An election the controller made by itself (its master's channel closed or its
heartbeats stopped) answers no request: it is known between the last answer naming the old epoch
and the first sign of the new one, and said so (``after``, ``by``); one it made for a broker's
CONTROLLER_ELECT_MASTER is known to the microsecond of its answer (``at``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from spark_analysis.decode.controller import (
    CONTROLLER_BROKER_EPOCH,
    CONTROLLER_CLOSED,
    CONTROLLER_EVENT,
    CONTROLLER_HEARTBEAT,
    CONTROLLER_NOTICE,
    CONTROLLER_UNDECODABLE,
    CONTROLLER_VIEW,
    NOTICE,
)
from spark_analysis.model.sessions import iso_seconds, iso_time
from spark_analysis.model.sessions import iso_time_or_none as _iso
from spark_analysis.model.tally import Groups
from twisted_namesrv.controller.codes import CONTROLLER_HEARTBEAT_TIMEOUT_MS
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.escapes import clipped_name

Item = dict[str, Any]
ELECT, ALTER = Req.CONTROLLER_ELECT_MASTER.name, Req.CONTROLLER_ALTER_SYNC_STATE_SET.name
APPLY, REGISTER = Req.CONTROLLER_APPLY_BROKER_ID.name, Req.CONTROLLER_REGISTER_BROKER.name
#: a broker heard this recently at the capture's end is alive in the controller's eyes (its default timeout)
HEARTBEAT_TIMEOUT_S = CONTROLLER_HEARTBEAT_TIMEOUT_MS / 1000
#: how far a fail-over at the NameServer may be from the election that explains it
MATCH_S = 30.0


class View(NamedTuple):
    master_id: int | None
    master_addr: str | None
    master_epoch: int | None
    ids: tuple[int, ...] | None
    set_epoch: int | None
    source: str
    answers: int
    first: float
    last: float


class Event(NamedTuple):
    what: str
    cluster: str | None
    broker_id: int | None
    broker_addr: str | None
    response: int | None
    epoch: int | None
    ids: tuple[int, ...] | None
    set_epoch: int | None
    times: int
    first: float


def controller_story(groups: Groups, controllers: Iterable[str], end: float | None = None) -> Item:
    """summary.json's ``controller``: per controller endpoint and broker group, its elections,
    syncStateSet changes, members and heartbeats; the calls it could not read; counts."""
    controllers = set(controllers)
    views: dict[tuple[str, str | None], list[View]] = {}
    events: dict[tuple[str, str | None], list[Event]] = {}
    for (server, name, *rest), (count, first, last, _) in groups.get(CONTROLLER_VIEW, {}).items():
        if server in controllers:
            views.setdefault((server, name), []).append(View._make((*rest, count, first, last)))
    for (server, name, *rest), (count, first, _, _) in groups.get(CONTROLLER_EVENT, {}).items():
        if server in controllers:
            events.setdefault((server, name), []).append(Event._make((*rest, count, first)))
    heard: dict[tuple[str, str | None], list[Item]] = {}
    closed = {(server, broker_id, addr, conn): (first, how) for (server, _, _, broker_id, addr, conn, how), (
        _, first, _, _) in groups.get(CONTROLLER_CLOSED, {}).items()}
    for (server, cluster, name, broker_id, addr, conn), (count, first, last, silence) in sorted(
            groups.get(CONTROLLER_HEARTBEAT, {}).items(), key=lambda kv: kv[1][1]):
        if server not in controllers:
            continue
        close = closed.get((server, broker_id, addr, conn))
        heard.setdefault((server, name), []).append({
            "cluster": cluster, "broker_id": broker_id, "broker_addr": addr, "connection": conn, "heartbeats": count,
            "first": iso_time(first), "last": iso_time(last), "max_silence_s": silence,
            "closed_at": _iso(close and close[0]), "closed": close and close[1],
            "alive_at_end": close is None and end is not None and end - last <= HEARTBEAT_TIMEOUT_S})
    known_epochs: dict[tuple[str, str | None], list[tuple[float, int, str]]] = {}
    for (server, name, broker_id, _, epoch), (_, first, _, _) in groups.get(CONTROLLER_BROKER_EPOCH, {}).items():
        known_epochs.setdefault((server, name), []).append((first, epoch, f"a heartbeat of brokerId {broker_id}"))
    stories: list[Item] = []
    for key in sorted(set(views) | set(events) | set(heard), key=lambda k: (k[0], k[1] or "")):
        server, name = key
        told = events.get(key, [])
        members = _members(told, heard.get(key, []))
        mine = views.get(key, []) + _notices(groups, server, set(members.values()))
        clusters = sorted({e.cluster for e in told if e.cluster} | {h["cluster"] for h in heard.get(key, [])})
        stories.append({"controller": server, "cluster": clusters[0] if clusters else None, "broker_name": name,
                        "members": [{"broker_id": i, "broker_addr": a} for i, a in sorted(members.items())],
                        "elections": (elections := _elections(mine, told, known_epochs.get(key, []), members)),
                        "sync_state_sets": _sync_state_sets(mine, told, elections),
                        "heartbeats": heard.get(key, [])})
    undecodable = [{"controller": server, "code_name": code, "why": why, "count": count, "first": iso_time(first),
                    "last": iso_time(last)}
                   for (server, code, why), (count, first, last, _) in sorted(
                       groups.get(CONTROLLER_UNDECODABLE, {}).items(), key=lambda kv: kv[1][1])
                   if server in controllers]
    return {"groups": stories, "undecodable": undecodable,
            "counts": {"elections": sum(len(s["elections"]) for s in stories),
                       "sync_state_set_changes": sum(len(s["sync_state_sets"]) for s in stories),
                       "heartbeats": sum(h["heartbeats"] for s in stories for h in s["heartbeats"]),
                       "undecodable": sum(u["count"] for u in undecodable)}}


def _members(events: list[Event], heard: list[Item]) -> dict[int, str]:
    """brokerId -> address, as the brokers applied, registered and heartbeat, and as the controller answered."""
    members: dict[int, str] = {}
    for e in sorted(events, key=lambda e: e.first):
        if e.broker_id is not None and e.broker_addr and (e.response == 0 or e.what == "member"):
            members[e.broker_id] = e.broker_addr
    for h in heard:
        members.setdefault(h["broker_id"], h["broker_addr"])
    return members


def _notices(groups: Groups, controller: str, addresses: set[str]) -> list[View]:
    """The controller's NOTIFY_BROKER_ROLE_CHANGED to a member of the group, as views: sent from
    its host (its client port is ephemeral) naming a master at one of the group's addresses."""
    host = controller.rsplit(":", 1)[0]
    return [View(master_id, addr, epoch, ids, set_epoch, f"{NOTICE.name} to {told}", count, first, last)
            for (sender, told, master_id, addr, epoch, ids, set_epoch), (count, first, last, _) in groups.get(
                CONTROLLER_NOTICE, {}).items() if sender == host and addr in addresses]


def _sign(view: View) -> str:
    return f"its {view.source}" if view.source.startswith(NOTICE.name) else f"its answer to {view.source}"


def _elections(views: list[View], events: list[Event], known: list[tuple[float, int, str]],
               members: dict[int, str]) -> list[Item]:
    """One per masterEpoch the controller's answers (and notices) name, in order."""
    found = []
    epochs = sorted({v.master_epoch for v in views if v.master_epoch is not None})
    for epoch in epochs:
        seen = sorted((v for v in views if v.master_epoch == epoch), key=lambda v: v.first)
        master_id = next((v.master_id for v in seen if v.master_id is not None), None)
        addr = next((v.master_addr for v in seen if v.master_addr), None) or members.get(master_id or -1)
        older = [v.last for v in views if v.master_epoch is not None and v.master_epoch < epoch]
        by, sign = min([(seen[0].first, _sign(seen[0]))] + [(t, what) for t, e, what in known if e >= epoch])
        answered = sorted((e for e in events if e.what == ELECT and e.response == 0 and e.epoch == epoch),
                          key=lambda e: e.first)
        with_set = next((v for v in seen if v.ids is not None and v.set_epoch is not None), None)
        item = {"master_epoch": epoch, "master_broker_id": master_id, "master_addr": addr,
                "at": None, "after": _iso(min(max(older), by)) if older else None, "by": iso_time(by),
                "how": "", "sync_state_set": None if with_set is None else list(with_set.ids or ()),
                "sync_state_set_epoch": None if with_set is None else with_set.set_epoch}
        if answered:
            asker = answered[0].broker_id
            item |= {"at": iso_time(answered[0].first), "after": None, "by": iso_time(answered[0].first),
                     "how": f"its answer to CONTROLLER_ELECT_MASTER of brokerId {asker}"}
        elif older:
            item["how"] = (f"answering no captured request (its own, as when its master's channel closes): its "
                           f"last word of an older masterEpoch at {item['after']}, the first sign of masterEpoch "
                           f"{epoch} at {item['by']} ({sign})")
        else:
            item["how"] = f"before the capture, or before its first word here ({item['by']}: {sign})"
        found.append(item)
    return found


def _sync_state_sets(views: list[View], events: list[Event], elections: list[Item]) -> list[Item]:
    """One per syncStateSetEpoch the controller's answers name: the set, and when it changed (an
    election sets it too: then as the election says)."""
    found = []
    for set_epoch in sorted({v.set_epoch for v in views if v.ids is not None and v.set_epoch is not None}):
        seen = sorted((v for v in views if v.set_epoch == set_epoch and v.ids is not None), key=lambda v: v.first)
        older = [v.last for v in views if v.ids is not None and v.set_epoch is not None and v.set_epoch < set_epoch]
        altered = sorted((e for e in events if e.what == ALTER and e.response == 0 and e.set_epoch == set_epoch),
                         key=lambda e: e.first)
        item = {"sync_state_set_epoch": set_epoch, "sync_state_set": list(seen[0].ids or ()), "at": None,
                "after": _iso(min(max(older), seen[0].first)) if older else None, "by": iso_time(seen[0].first),
                "how": ""}
        if altered:
            item |= {"at": iso_time(altered[0].first), "after": None,
                     "how": f"CONTROLLER_ALTER_SYNC_STATE_SET of master brokerId {altered[0].broker_id} "
                            f"(masterEpoch {altered[0].epoch})"}
        elif made := next((e for e in elections if e["sync_state_set_epoch"] == set_epoch and (
                e["at"] or e["after"])), None):
            item |= {"at": made["at"], "after": made["after"], "by": made["by"],
                     "how": f"the election of masterEpoch {made['master_epoch']}"}
        elif older:
            item["how"] = "seen in its answers (a change answered to a request not captured)"
        else:
            item["how"] = "in force at its first answer here"
        found.append(item)
    return found


def with_controller_view(stories: list[Item], controller: Item) -> list[Item]:
    """The NameServer's fail-over stories with the controller's view of them: the election that
    made the new master (masterEpoch, when), the syncStateSet before and after, the old master
    back in sync, and its heartbeats at the controller ending; other stories unchanged."""
    told = []
    for story in stories:
        if story["kind"] == "failover":
            story = {**story, **_failover_view(story, controller["groups"])}
        told.append(story)
    return told


def _seconds(text: str | None) -> float:
    return float("nan") if text is None else iso_seconds(text)


def _failover_view(story: Item, groups: list[Item]) -> Item:
    lost, made = _seconds(story["t"]), _seconds(story["new_master_at"])
    best: tuple[float, Item, Item] | None = None
    for group in groups:
        if group["broker_name"] != story["broker_name"] or (group["cluster"] and story["cluster"]
                                                            and group["cluster"] != story["cluster"]):
            continue
        for election in group["elections"]:
            if election["master_addr"] != story["new_master"] or election["after"] is None and election["at"] is None:
                continue
            distance = abs(_seconds(election["by"]) - made)
            if distance <= MATCH_S and (best is None or distance < best[0]):
                best = (distance, group, election)
    if best is None:
        return {"controller": None}
    _, group, election = best
    epoch = election["master_epoch"]
    before = next((e for e in reversed(group["elections"]) if e["master_epoch"] < epoch), None)
    sets = group["sync_state_sets"]
    after_set = next((s for s in sets if s["sync_state_set_epoch"] == election["sync_state_set_epoch"]), None)
    start = _seconds(election["after"] or election["at"] or election["by"])
    before_set = next((s for s in reversed(sets) if _seconds(s["by"]) <= start
                       and s["sync_state_set_epoch"] < (election["sync_state_set_epoch"] or 0)), None)
    old_id = next((m["broker_id"] for m in group["members"] if m["broker_addr"] == story["old_master"]), None)
    back = next((s for s in sets if after_set is not None and s["sync_state_set_epoch"] > after_set[
        "sync_state_set_epoch"] and old_id in s["sync_state_set"]), None)
    ended = [h for h in group["heartbeats"] if h["broker_addr"] == story["old_master"]
             and _seconds(h["last"]) <= lost + MATCH_S and _seconds(h["last"]) <= made + MATCH_S]
    last_heard = max(ended, key=lambda h: h["last"]) if ended else None
    after, how = election["after"], election["how"]
    if last_heard is not None and after is not None:
        # the controller elects for a master it no longer hears: not before its heartbeat connection
        # closed, or its last heartbeat was heartbeatTimeoutMills old (the default, 10 s)
        inactive = _seconds(last_heard["closed_at"]) if last_heard["closed_at"] else _seconds(
            last_heard["last"]) + HEARTBEAT_TIMEOUT_S
        if _seconds(after) < inactive <= _seconds(election["by"]):
            after = iso_time(inactive)
            how += (f"; not before the old master went inactive in its eyes at {after} (its heartbeat connection "
                    f"closed)" if last_heard["closed_at"] else f" (its heartbeats {HEARTBEAT_TIMEOUT_S:g} s old)")
    return {"controller": group["controller"], "master_epoch": epoch,
            "master_epoch_before": None if before is None else before["master_epoch"],
            "new_master_broker_id": election["master_broker_id"], "old_master_broker_id": old_id,
            "elected_at": election["at"], "elected_after": after, "elected_by": election["by"],
            "elected_how": how,
            "sync_state_set_before": None if before_set is None else before_set["sync_state_set"],
            "sync_state_set_epoch_before": None if before_set is None else before_set["sync_state_set_epoch"],
            "sync_state_set_after": None if after_set is None else after_set["sync_state_set"],
            "sync_state_set_epoch_after": None if after_set is None else after_set["sync_state_set_epoch"],
            "old_master_in_sync_again_at": None if back is None else back["at"] or back["by"],
            "old_master_last_heartbeat": None if last_heard is None else last_heard["last"],
            "old_master_heartbeats_closed_at": None if last_heard is None else last_heard["closed_at"]}


def failover_words(story: Item) -> str:
    """The controller's part of a fail-over's one line ('' when no controller's traffic told it)."""
    if not story.get("controller"):
        return ""
    when = (f"at {story['elected_at']}" if story["elected_at"] else
            f"between {story['elected_after']} and {story['elected_by']}" if story["elected_after"] else
            f"by {story['elected_by']}")
    text = (f"; controller {story['controller']} elected brokerId {story['new_master_broker_id']} "
            f"({clipped_name(story['new_master'])}) with masterEpoch {story['master_epoch']} {when}")
    if story["sync_state_set_after"] is not None:
        before = (f"{_set(story['sync_state_set_before'])} (epoch {story['sync_state_set_epoch_before']}) -> "
                  if story["sync_state_set_before"] is not None else "")
        text += f", syncStateSet {before}{_set(story['sync_state_set_after'])} (epoch " \
                f"{story['sync_state_set_epoch_after']})"
    if story["old_master_heartbeats_closed_at"]:
        text += f"; the old master's heartbeat connection to it closed at {story['old_master_heartbeats_closed_at']}"
    if story["old_master_in_sync_again_at"]:
        text += f"; the old master in sync again at {story['old_master_in_sync_again_at']}"
    return text


def _set(ids: list[int] | None) -> str:
    return "{" + ", ".join(map(str, ids or ())) + "}"


def elections_untold(controller: Item, stories: list[Item]) -> list[Item]:
    """Elections made within the capture that no fail-over tells (e.g. a group's first master): each
    an info item."""
    told = {(s.get("controller"), s["broker_name"], s.get("master_epoch")) for s in stories
            if s["kind"] == "failover" and s.get("controller")}
    items = []
    for group in controller["groups"]:
        for e in group["elections"]:
            if (group["controller"], group["broker_name"], e["master_epoch"]) in told or not (e["at"] or e["after"]):
                continue
            when = f"at {e['at']}" if e["at"] else f"between {e['after']} and {e['by']}"
            items.append({"controller": group["controller"], "cluster": group["cluster"],
                          "broker_name": group["broker_name"], "t": e["at"] or e["after"], "by": e["by"],
                          "master_epoch": e["master_epoch"], "master_broker_id": e["master_broker_id"],
                          "master_addr": e["master_addr"], "sync_state_set": e["sync_state_set"],
                          "sync_state_set_epoch": e["sync_state_set_epoch"], "how": e["how"],
                          "message": f"{clipped_name(group['cluster'] or '?')} / "
                                     f"{clipped_name(group['broker_name'] or '?')}: controller "
                                     f"{group['controller']} elected brokerId {e['master_broker_id']} "
                                     f"({clipped_name(e['master_addr'])}) master with masterEpoch {e['master_epoch']} "
                                     f"{when} ({e['how']}); syncStateSet {_set(e['sync_state_set'])}"})
    return items
