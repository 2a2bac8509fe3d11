"""The panels' own words, in the language of the edition the kernel runs (``COURSE_LANG``).

The approval panel, the capstone's chat panel and the lessons' self-checks label their buttons,
boxes and states in words (a screen reader reads them, and a colour only repeats them). A
Japanese notebook's kernel runs with ``COURSE_LANG=ja`` (``course.py lab --lang ja`` sets it),
so its panels speak Japanese; what the agent, the tools and the learner wrote is shown as it is.
"""

from __future__ import annotations

from course_lib.config import course_language

WORDS: dict[str, dict[str, str]] = {
    "en": {
        "approve": "Approve", "deny": "Deny",
        "approve tip": "Approve: run {name} now, with the arguments shown",
        "deny tip": "Deny: drop {name}; it never runs",
        "waiting": "waiting for your decision",
        "waiting header": "<b>Waiting for approval:</b> {count} call(s)",
        "approved": "approved: {result}", "denied": "denied: not done",
        "user asked": "The user asked{earlier}:", "earlier": " (an earlier request)",
        "send": "Send", "working": "Answering...", "question": "Your question",
        "example": "e.g. Is SKU-00042 in stock in Tokyo?", "send tip": "Send your question to the kiosk",
        "customer": "customer:", "kiosk": "kiosk:", "none": "none", "stopped": "(stopped: {reason})",
        "tools line": "tools: {calls}; {tokens} tokens, {seconds:.1f} s",
        "check yourself": "<b>Check yourself: {title}</b> (write your answer first, then compare)",
        "check yourself plain": "Check yourself: {title}", "your answer": "Your answer",
        "show answer": "Show the course's answer",
        "answer first": "Write your answer first: the point is to answer before reading.",
    },
    "ja": {
        "approve": "承認", "deny": "却下",
        "approve tip": "承認: {name} を、表示された引数で今すぐ実行します",
        "deny tip": "却下: {name} を取り消します。実行されません",
        "waiting": "あなたの判断を待っています",
        "waiting header": "<b>承認待ち:</b> {count} 件の呼び出し",
        "approved": "承認しました: {result}", "denied": "却下しました: 実行していません",
        "user asked": "ユーザーの依頼{earlier}:", "earlier": " (前の依頼)",
        "send": "送信", "working": "回答中...", "question": "質問",
        "example": "例: SKU-00042 は東京に在庫がありますか?", "send tip": "質問をキオスクに送ります",
        "customer": "お客様:", "kiosk": "キオスク:", "none": "なし", "stopped": "(停止: {reason})",
        "tools line": "ツール: {calls}。{tokens} トークン、{seconds:.1f} 秒",
        "check yourself": "<b>理解度の確認: {title}</b> (まず自分の答えを書いてから、比べてください)",
        "check yourself plain": "理解度の確認: {title}", "your answer": "あなたの答え",
        "show answer": "コースの答えを見る",
        "answer first": "まず自分の答えを書いてください。読む前に答えることに意味があります。",
    },
}


def say(key: str, **values: object) -> str:
    """The panel's word for ``key`` in this kernel's edition (English where it has none), with
    ``values`` filled in."""
    words = WORDS.get(course_language(), WORDS["en"])
    return words.get(key, WORDS["en"][key]).format(**values)
