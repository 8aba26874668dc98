// Waiting: a sleep that ends when the user leaves the page.

/** Waits `ms` unless `signal` aborts first (then rejects). */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(new DOMException("left the page", "AbortError"));
      },
      { once: true },
    );
  });
}

