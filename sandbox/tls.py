"""The sandbox's TLS: a certificate authority made when a sandbox starts, and the serving
certificate it signs, so that clients verify the sandbox as they verify a real API server.

A real cluster serves its API over HTTPS only, and clients behave differently without it:
kubectl (client-go) sends no bearer token to a plain-HTTP server, so against one every request
is ``system:anonymous`` and ``usher sandbox --rbac`` could not be tried with a ServiceAccount's
token. :class:`CertificateAuthority` makes what kubeadm makes for a cluster, in miniature:

- a CA: an ECDSA P-256 key and a self-signed certificate (``CA:TRUE``, key usage
  ``keyCertSign``/``cRLSign``, both critical, with a subject key identifier), whose PEM is what a
  kubeconfig's ``certificate-authority-data`` carries (:attr:`CertificateAuthority.pem`);
- per :meth:`~CertificateAuthority.serving_context`, a serving certificate for the names the
  server is reached by (``127.0.0.1``, ``::1``, ``localhost`` and the host it listens on, as
  subject alternative names: Go and Python check SANs only), with ``serverAuth`` extended key
  usage and the authority key identifier that strict verifiers (Python 3.13's default
  ``VERIFY_X509_STRICT``) ask for, in an ``ssl.SSLContext`` ready for ``create_server``.

ECDSA rather than RSA because a key is made per sandbox (and per in-process test server): a P-256
key takes well under a millisecond, an RSA-2048 one tens of milliseconds. Everything is short
lived (``lifetime``, a week by default, back-dated a little for clock skew) and stays in memory:
``ssl`` loads a key only from a file, so the serving key passes through a private temporary
directory that is removed as soon as it is loaded. A restarted server given the same
:class:`CertificateAuthority` keeps being trusted by the kubeconfigs already written, as a real
cluster's clients keep trusting it across an API server restart.

The sandbox is an independent oracle: this module is the sandbox's side of TLS and shares no code
with usher's client, which verifies the server from the kubeconfig alone.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import socket
import ssl
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LIFETIME = timedelta(days=7)
"""How long the CA and its serving certificates are valid from their making."""
SKEW = timedelta(hours=1)
"""How far back ``notBefore`` is set, so a client whose clock runs a little behind accepts them."""
LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")
"""The names every serving certificate carries: what the sandbox's kubeconfig and users dial."""

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class CertificateAuthority:
    """A CA for one sandbox: its key and self-signed certificate, and the serving contexts it signs."""

    def __init__(self, name: str = "usher-sandbox-ca", lifetime: timedelta = LIFETIME) -> None:
        self.lifetime = lifetime
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        public = self._key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW)
            .not_valid_after(now + lifetime)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pem: bytes = self.certificate.public_bytes(serialization.Encoding.PEM)
        """The CA certificate, PEM: what clients are given to trust."""

    @property
    def data(self) -> str:
        """:attr:`pem` base64-encoded: a kubeconfig's ``certificate-authority-data``."""
        return base64.b64encode(self.pem).decode()

    def serving_context(self, hosts: Iterable[str] = ()) -> ssl.SSLContext:
        """A server-side context with a fresh certificate for ``hosts`` and the loopback names.

        A host that is an address is an IP SAN, else a DNS SAN; a wildcard listen address
        (``0.0.0.0``, ``::``) stands for this machine, so its host name goes in instead."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        names = _subject_alternative_names([*LOOPBACK_NAMES, *hosts])
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "usher-sandbox-apiserver")]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW)
            .not_valid_after(min(now + self.lifetime, self.certificate.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])  # no h2: the server speaks HTTP/1.1 only
        chain = certificate.public_bytes(serialization.Encoding.PEM) + self.pem
        secret = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        with tempfile.TemporaryDirectory(prefix="usher-sandbox-tls-") as private:  # mode 0700
            cert_path, key_path = os.path.join(private, "tls.crt"), os.path.join(private, "tls.key")
            with open(cert_path, "wb") as out:
                out.write(chain)
            with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(secret)
            context.load_cert_chain(cert_path, key_path)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client-side context that trusts this CA alone (for the sandbox's own clients and tests)."""
        return ssl.create_default_context(cadata=self.pem.decode())


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _subject_alternative_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    seen: set[str] = set()
    for host in hosts:
        host = host.strip("[]")
        address = _address(host)
        if address is not None and address.is_unspecified:
            host, address = socket.gethostname(), None
        key = str(address) if address is not None else host.lower()
        if not host or key in seen:
            continue
        seen.add(key)
        names.append(x509.IPAddress(address) if address is not None else x509.DNSName(key))
    return names


def _address(host: str) -> _Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
