"""The SGLang tier: SGLang 0.5.23's own server around a scripted scheduler (see conftest.py)."""
