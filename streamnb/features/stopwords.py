"""Built-in stop-word lists (option ``stop_lists``): very common words that say little.

The English list is the usual function words; the Chinese one the particles, pronouns and
conjunctions that jieba emits most often.

>>> "the" in STOP_LISTS["english"], "的" in STOP_LISTS["chinese"]
(True, True)
"""

from __future__ import annotations

__all__ = ["STOP_LISTS"]

_ENGLISH = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its itself
just me more most my myself no nor not now of off on once only or other our ours ourselves out
over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves
"""

_CHINESE = """
的 了 是 在 我 有 和 就 不 人 都 一 一个 上 也 很 到 说 要 去 你 会 着 没有 看 好 自己 这 那 他 她
它 们 我们 你们 他们 这个 那个 之 与 及 或 而 但 并 等 被 把 让 给 从 对 为 以 于 吗 呢 吧 啊 呀 哦
嗯 么 什么 怎么 因为 所以 如果 虽然 可以 还 又 再 已经 这样 那样 这些 那些 其 此 该 个 地 得
"""

STOP_LISTS: dict[str, frozenset[str]] = {
    "english": frozenset(_ENGLISH.split()),
    "chinese": frozenset(_CHINESE.split()),
}
