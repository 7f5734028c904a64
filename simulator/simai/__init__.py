"""SimAI 1.7's analytical model, reproduced exactly: its model, its tables, the busbw.yaml reader."""
