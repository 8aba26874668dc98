// The signed-in session: the bearer token and who it belongs to, kept in
// sessionStorage only (never in a URL, a cookie or localStorage), so it
// goes away with the tab.

const TOKEN = "sless.token";
const WHO = "sless.whoami";

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
