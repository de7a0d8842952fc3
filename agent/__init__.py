"""The LangGraph control plane: goal -> candidates -> approval -> tools -> learn -> decide -> report."""
