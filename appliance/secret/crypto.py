"""Encryption of secret material at rest.

AES-256-GCM with a key generated on first start and kept in
`<state-dir>/secret-encryption.key` (mode 0600), a private file outside the files of
ordinary kinds: a copy of the kind files alone does not reveal a secret. Each ciphertext
is bound to its kind, record and field (associated data), so a value cannot be moved to
another record by editing the file.
"""

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_FILE = "secret-encryption.key"
PREFIX = "enc1:"


class DecryptionError(Exception):
    pass


class SecretBox:
    def __init__(self, store):
        self._aead = AESGCM(store.write_private(KEY_FILE, AESGCM.generate_key(256),
                                                exclusive=True))

    @staticmethod
    def _context(kind, uuid, field):
        return f"{kind}:{uuid}:{field}".encode()

    def seal(self, kind, uuid, field, plaintext):
        if plaintext is None:
            return None
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), self._context(kind, uuid, field))
        return PREFIX + base64.b64encode(nonce + sealed).decode()

    def open(self, kind, uuid, field, stored):
        if stored is None:
            return None
        if not stored.startswith(PREFIX):
            raise DecryptionError(f"{kind} {uuid} {field} is not sealed")
        raw = base64.b64decode(stored[len(PREFIX):])
        try:
            return self._aead.decrypt(raw[:12], raw[12:],
                                      self._context(kind, uuid, field)).decode()
        except InvalidTag:
            raise DecryptionError(f"{kind} {uuid} {field} does not decrypt") from None

    def open_fields(self, kind, record, names):
        """A copy of `record` with the sealed fields `names` opened."""
        out = dict(record)
        for name in names:
            out[name] = self.open(kind, record["uuid"], name, record.get(name))
        return out
