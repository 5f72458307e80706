"""User-trainer plug-ins for tests/test_verdict_budget.py (imported relative to the audit file)."""
