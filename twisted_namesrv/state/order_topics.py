"""ORDER_TOPIC_CONFIG, the KV namespace RocketMQ reads as its order topics: a key is a topic, its value
the route's ``orderTopicConf`` (``broker-a:4;broker-b:4``: each broker group and how many queues of the
topic it holds in order), which every Java producer of that topic parses as it looks the route up
(``MQClientInstance.topicRouteData2TopicPublishInfo``, 4.9.8 and 5.3.3 alike): ``split(";")``, each
part ``split(":")``, ``Integer.parseInt(item[1])`` queues made for ``item[0]``, one MessageQueue each.

Java's NameServer stores any value from any peer, so one unsigned PUT_KV_CONFIG (without ACL) broke
every producer of a topic: ``x`` threw ArrayIndexOutOfBoundsException and ``a:x`` NumberFormatException
in each route update (no send could find the topic), and ``a:2147483647`` made each producer build
2^31 MessageQueues, out of memory.  ``order_topic_conf_problem`` says why a put would serve such a value
(PUT_KV_CONFIG refuses it: ``order_topic_conf``); anything a Java producer parses into a bounded list
is taken as Java takes it.  The key must be a topic a client may look up (Java's TopicValidator:
``%|a-zA-Z0-9_-``, at most 127 characters): any other is served to no producer, but the namespace is
handed to every 5.x broker in each registration answer (returnOrderTopicConfigToBroker), so what it
holds is only what it is for.
"""

from __future__ import annotations

import re

from ..escapes import clipped_repr, first_control
from ..remoting.values import parse_java_integer

#: the most queues one orderTopicConf may name, all its brokers together: a producer makes one
#: MessageQueue each (65,536 are a few MB; a topic has a few dozen)
ORDER_QUEUES_MAX = 65536
#: TopicValidator.TOPIC_MAX_LENGTH (4.9.8 and 5.3.3)
TOPIC_MAX_LENGTH = 127
#: TopicValidator's characters: ``^[%|a-zA-Z0-9_-]+$``
_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]+")


def order_topic_conf_problem(topic: str, value: str | None) -> str | None:
    """Why ``value`` under ``topic`` in ORDER_TOPIC_CONFIG would break or swamp the producers it is
    served to, or None when it is taken (a null or empty value: Java's clients skip it)."""
    if len(topic) > TOPIC_MAX_LENGTH or not _TOPIC.fullmatch(topic):
        return (f"{clipped_repr(topic)} is not a topic name a client may look up "
                f"(at most {TOPIC_MAX_LENGTH} of %|a-zA-Z0-9_-)")
    if not value:
        return None
    queues = 0
    for part in _java_split(value, ";"):
        item = _java_split(part, ":")
        if len(item) < 2:
            return f"{clipped_repr(part)} is not brokerName:queueNums (a producer's route update throws)"
        nums = parse_java_integer(item[1], 32)
        if nums is None:
            return f"{clipped_repr(item[1])} is not a queue count (Integer.parseInt throws in every producer)"
        control = first_control(item[0])
        if not item[0] or control:
            why = f"holds a control character ({control})" if control else "is empty"
            return f"the broker name of {clipped_repr(part)} {why}"
        queues += max(nums, 0)
        if queues > ORDER_QUEUES_MAX:
            return f"it names more than {ORDER_QUEUES_MAX} queues (each producer makes one object a queue)"
    return None


def _java_split(text: str, separator: str) -> list[str]:
    """``String.split`` of a one-character separator that is no regex metacharacter: trailing empty
    parts dropped (``"a:1;"`` is one part, ``";;"`` none), leading and inner ones kept."""
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts
