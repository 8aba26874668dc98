//! Sealing secret values: ChaCha20-Poly1305 (ring) with a random 96-bit
//! nonce per value, and the value's place (namespace, secret, key) as the
//! associated data, so a sealed value copied to another place does not
//! open. A sealed value is `v1:` and the base64 of nonce, ciphertext and
//! tag; the key that sealed it is named by its id (a digest of the key,
//! which tells nothing about it) stored beside it.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

/// Length of a key in bytes.
pub const KEY_LEN: usize = 32;

const PREFIX: &str = "v1:";

/// One sealing key and its id.
pub struct SealingKey {
    id: String,
    key: LessSafeKey,
}

impl SealingKey {
    pub fn new(bytes: &[u8; KEY_LEN]) -> SealingKey {
        let digest = Sha256::new()
            .chain_update(b"sless secret key id\0")
            .chain_update(bytes)
            .finalize();
        let key = UnboundKey::new(&CHACHA20_POLY1305, bytes).expect("a 32-byte key fits ChaCha20-Poly1305");
        SealingKey {
            id: hex::encode(&digest[..8]),
            key: LessSafeKey::new(key),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Seals `value` for its place.
    pub fn seal(&self, place: &Place<'_>, value: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("the system's random source works");
        let mut sealed = value.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(place.associated_data()),
                &mut sealed,
            )
            .expect("sealing a bounded value cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        format!("{PREFIX}{}", STANDARD.encode(out))
    }

    /// Opens a value sealed for `place`; None when it was sealed with
    /// another key, for another place, or damaged.
    pub fn open(&self, place: &Place<'_>, sealed: &str) -> Option<Vec<u8>> {
        let bytes = STANDARD.decode(sealed.strip_prefix(PREFIX)?).ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let (nonce, body) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(place.associated_data()), &mut body)
            .ok()?;
        Some(plain.to_vec())
    }
}

/// Where a value belongs: what its seal is bound to.
pub struct Place<'a> {
    pub namespace: &'a str,
    pub secret: &'a str,
    pub key: &'a str,
}

impl Place<'_> {
    fn associated_data(&self) -> Vec<u8> {
        // NUL cannot occur in a name or key, so the parts cannot shift.
        format!("sless-secret\0{}\0{}\0{}", self.namespace, self.secret, self.key).into_bytes()
    }
}

/// A key from its base64 text (standard or URL-safe alphabet, padded or
/// not); the error never repeats the text.
pub fn decode_key(text: &str) -> Result<[u8; KEY_LEN], String> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let text = text.trim();
    let bytes = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .ok_or("not valid base64 (expected the base64 of 32 random bytes, e.g. `openssl rand -base64 32`)")?;
    bytes.try_into().map_err(|bytes: Vec<u8>| {
        format!(
            "{} bytes after base64 decoding; expected {KEY_LEN} (e.g. `openssl rand -base64 32`)",
            bytes.len()
        )
    })
}

/// 32 fresh random bytes.
pub fn generate_key() -> [u8; KEY_LEN] {
    let mut key = [0u8; KEY_LEN];
    SystemRandom::new()
        .fill(&mut key)
        .expect("the system's random source works");
    key
}

/// The base64 text of a key, as [`decode_key`] reads it.
pub fn encode_key(key: &[u8; KEY_LEN]) -> String {
    STANDARD.encode(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place<'a>(secret: &'a str, key: &'a str) -> Place<'a> {
        Place {
            namespace: "ns",
            secret,
            key,
        }
    }

    #[test]
    fn a_sealed_value_opens_only_in_its_place_with_its_key() {
        let key = SealingKey::new(&generate_key());
        let sealed = key.seal(&place("db", "password"), b"hunter2");
        assert!(!sealed.contains("hunter2"));
        assert_eq!(key.open(&place("db", "password"), &sealed).unwrap(), b"hunter2");
        // Another place (a swapped ciphertext), another key, damage: nothing.
        assert!(key.open(&place("db", "user"), &sealed).is_none());
        assert!(key.open(&place("other", "password"), &sealed).is_none());
        assert!(SealingKey::new(&generate_key())
            .open(&place("db", "password"), &sealed)
            .is_none());
        let mut damaged = sealed.clone();
        damaged.replace_range(10..11, if &sealed[10..11] == "A" { "B" } else { "A" });
        assert!(key.open(&place("db", "password"), &damaged).is_none());
        // A fresh nonce each time.
        assert_ne!(sealed, key.seal(&place("db", "password"), b"hunter2"));
    }

    #[test]
    fn keys_decode_from_base64_and_errors_do_not_repeat_them() {
        let key = generate_key();
        assert_eq!(decode_key(&encode_key(&key)).unwrap(), key);
        let short = encode_key(&key)[..20].to_string();
        let error = decode_key(&short).unwrap_err();
        assert!(!error.contains(&short), "{error}");
        assert!(decode_key("not base64!").is_err());
        let id = SealingKey::new(&key).id().to_string();
        assert_eq!(id.len(), 16);
        assert_eq!(id, SealingKey::new(&key).id());
    }
}
