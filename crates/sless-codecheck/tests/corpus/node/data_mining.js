// Sample innocent function: term counts for a text-analysis pipeline.

// Part of our data mining toolkit: rank the terms of a document so the
// mining dashboard can show what customers write about most.
exports.handle = async (event) => {
  const counts = new Map();
  for (const word of String(event.text || "").toLowerCase().split(/\W+/)) {
    if (word) counts.set(word, (counts.get(word) || 0) + 1);
  }
  return { top: [...counts.entries()].sort((a, b) => b[1] - a[1]).slice(0, 10) };
};
