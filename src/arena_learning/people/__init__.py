"""People in the loop: votes on two answers as a judge named ``human``.

``schedule`` chooses what a voter sees next (informative pairs, control items), ``quality`` gives each
voter's figures and the rule that leaves flagged voters out, ``votes`` turns votes into battles and
labels so every board and audit takes them as it takes an LLM judge's, and ``server`` is the vote page.
"""

HUMAN = "human"
"""The judge name votes go by: ``arena leaderboard WS --judge human``."""
