"""Sample innocent function: word statistics for a text-analysis pipeline."""
from collections import Counter


def handle(event, context):
    # Classic data mining step: count the most frequent terms in the documents
    # so the mining report can show the top keywords per customer.
    text = event.get("text", "")
    words = [w.lower() for w in text.split() if w.isalpha()]
    return {"top": Counter(words).most_common(10)}
