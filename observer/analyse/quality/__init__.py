"""Quality per version: golden sets, rule checks and LLM-as-judge."""
