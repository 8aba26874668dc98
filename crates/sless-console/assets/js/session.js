// The signed-in session: the bearer token and who it belongs to, kept in
// sessionStorage only (never in a URL, a cookie or localStorage), so it
// goes away with the tab.

const TOKEN = "sless.token";
const WHO = "sless.whoami";
const RETURN_TO = "sless.return";

export function token() {
  return sessionStorage.getItem(TOKEN);
}

/** What `GET /v1/whoami` said about the token: {name, admin, namespaces}. */
export function whoami() {
  try {
    return JSON.parse(sessionStorage.getItem(WHO) || "null");
  } catch {
    return null;
  }
}

export function signIn(secret, who) {
  sessionStorage.setItem(TOKEN, secret);
  sessionStorage.setItem(WHO, JSON.stringify(who));
}

export function signOut() {
  sessionStorage.removeItem(TOKEN);
  sessionStorage.removeItem(WHO);
}

/** Namespaces to offer: the token's own, or for an admin those in use. */
export function namespaces() {
  return whoami()?.namespaces ?? [];
}

/** Keeps the route (a hash) a signed-out visit asked for, to go on to after signing in. */
export function keepRoute(hash) {
  sessionStorage.setItem(RETURN_TO, hash);
}

/** The kept route, if any, forgotten as it is taken. */
export function takeRoute() {
  const hash = sessionStorage.getItem(RETURN_TO);
  sessionStorage.removeItem(RETURN_TO);
  return hash;
}
