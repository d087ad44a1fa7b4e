"""The content policy: what text may be stored as memory and shown to the model (`content`),
with its parts (`characters`, `markers`, `scanning`, `secrets`). Pure: no I/O
(tests/unit/test_purity.py).
"""
