"""System checks for the LLMCHAT setting."""
