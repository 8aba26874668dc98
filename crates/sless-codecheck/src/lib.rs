//! Code-safety gate: static rules and an optional LLM reviewer (in progress).
