"""Generation of passwords and keys, from the operating system's cryptographic source."""

import secrets

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

PASSWORD_LENGTH = (8, 4096)
RSA_BITS = (2048, 3072, 4096)


def password(method, length):
    if method == "AUTO_HEX":
        return secrets.token_hex((length + 1) // 2)[:length]
    if method == "AUTO_URL_SAFE":
        return secrets.token_urlsafe(length)[:length]
    raise ValueError(f"method {method} generates nothing")


def rsa_private(bits):
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def rsa_key_pem(bits):
    """(private PKCS#8 PEM, public SubjectPublicKeyInfo PEM)."""
    key = rsa_private(bits)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


def ssh_key(algorithm, bits, comment):
    """(private key in OpenSSH format, public key line, SHA256 fingerprint)."""
    key = ed25519.Ed25519PrivateKey.generate() if algorithm == "ed25519" else rsa_private(bits)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public_raw = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH)
    import base64
    import hashlib
    blob = base64.b64decode(public_raw.split()[1])
    fingerprint = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    public = public_raw.decode() + (f" {comment}" if comment else "")
    return private, public, fingerprint
