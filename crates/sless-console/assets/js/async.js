// Waiting and ordering: a sleep that ends when the user leaves the page,
// and a guard for panels where a newer request makes an older one's
// answer stale.

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

/**
 * For a panel that shows one answer at a time (a page of a list, the picked
 * item's detail): `newest(promise, show)` calls `show` with the answer only
 * if no later `newest` call was made meanwhile, so a slow older answer
 * never replaces a newer one. A stale failure is dropped too.
 */
export function newestOnly() {
  let last = 0;
  return async (promise, show) => {
    const mine = ++last;
    let value;
    try {
      value = await promise;
    } catch (e) {
      if (mine === last) throw e;
      return;
    }
    if (mine === last) show(value);
  };
}
