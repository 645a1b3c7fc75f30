"""Where the cluster is and who usher is there: credentials, TLS material and the proxy.

Credentials come from ``kubernetes.config`` (:class:`Credentials`): an explicit kubeconfig
path, else ``$KUBECONFIG`` or ``~/.kube/config``, else the in-cluster service account. The
library fills a ``kubernetes.client.Configuration``; the address and TLS material build the
HTTP sessions (:func:`tls_context`, :func:`proxy_url`), and the ``Authorization`` header is read
through ``Configuration.auth_settings()`` before every request, because that call runs the
library's refresh hook (an exec plugin whose token has expired runs again; the in-cluster token
file is re-read every minute). The hook may run a subprocess, so the transport calls it in a
worker thread, one at a time. A static token (a kubeconfig user with ``token`` or ``tokenFile``
and neither ``exec`` nor ``auth-provider``: the library sets a hook for it too, but the hook
never changes it) is read once a minute instead (:attr:`Credentials.refreshes` tells them apart).

The server's address, its TLS material (CA, client certificate, ``insecure-skip-tls-verify``,
``tls-server-name`` for SNI) and the proxy (the kubeconfig's ``proxy-url``, else
``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` unless ``NO_PROXY`` names the server) are read from
the credentials; :func:`transport_identity` says when a reload changed them, so that the
transport rebuilds its sessions. Nothing here sends a request.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import urllib.request
from urllib.parse import SplitResult, urlsplit

from kubernetes.client import Configuration
from kubernetes.config import (
    ConfigException,
    list_kube_config_contexts,
    load_incluster_config,
    load_kube_config,
)
from kubernetes.config.kube_config import KubeConfigMerger

from .errors import DEMO_HINT, KubeConfigError, one_line


class Credentials:
    """Where the cluster is and who usher is there, loaded through ``kubernetes.config``.

    Resolution order: the explicit kubeconfig path; else ``$KUBECONFIG`` (a path list, as
    kubectl reads it) or ``~/.kube/config``; else the in-cluster service account. ``load`` and
    ``authorization`` block (files, exec plugins): call them from a worker thread.
    """

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.config = Configuration()
        self.generation = 0
        self.refreshes = True
        """Whether the token may change without a reload (an ``exec`` plugin or an ``auth-provider``
        in the kubeconfig's user, or the in-cluster token file): then it is asked for every request."""
        self._source = "the in-cluster service account"

    def load(self) -> None:
        """(Re)read the credentials; raises :class:`KubeConfigError` with a one-line message."""
        config = Configuration()
        path = self._kubeconfig_path()
        try:
            if path is None:
                self._source = "the in-cluster service account"
                load_incluster_config(client_configuration=config)
                refreshes = True
            else:
                self._source = f"kubeconfig {path}"
                self._check_context(path)
                load_kube_config(
                    config_file=path,
                    context=self.context,
                    client_configuration=config,
                    persist_config=False,
                )
                refreshes = _user_refreshes(path, self.context)
        except ConfigException as exc:
            raise KubeConfigError(f"cannot use {self._source}: {one_line(exc)}; {DEMO_HINT}") from exc
        self.config = config
        self.refreshes = refreshes
        self.generation += 1

    def describe(self) -> str:
        context = f" (context {self.context})" if self.context else ""
        return f"{self._source}{context}"

    def authorization(self) -> str | None:
        """The Authorization header value, refreshed by the library's hook when it is due."""
        setting = self.config.auth_settings().get("BearerToken")
        return setting["value"] if setting else None

    def _kubeconfig_path(self) -> str | None:
        """The kubeconfig (or ``$KUBECONFIG`` path list) to read; None for in-cluster."""
        if self.kubeconfig:
            path = os.path.expanduser(self.kubeconfig)
            if not os.path.isfile(path):
                raise KubeConfigError(f"kubeconfig {path} does not exist; pass another --kubeconfig, {DEMO_HINT}")
            return path
        listed = os.environ.get("KUBECONFIG", "")
        if listed:
            if any(os.path.isfile(os.path.expanduser(p)) for p in listed.split(os.pathsep) if p):
                return listed
            raise KubeConfigError(f"$KUBECONFIG ({listed}) names no existing file; {DEMO_HINT}")
        default = os.path.expanduser("~/.kube/config")
        if os.path.isfile(default):
            return default
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return None
        raise KubeConfigError(
            f"no kubeconfig (~/.kube/config, $KUBECONFIG) and not running in a cluster; "
            f"pass --kubeconfig, {DEMO_HINT}"
        )

    def _check_context(self, path: str) -> None:
        if not self.context:
            return
        contexts, _ = list_kube_config_contexts(config_file=path)
        names = [context["name"] for context in contexts]
        if self.context not in names:
            raise KubeConfigError(
                f"kubeconfig {path} has no context {self.context!r} "
                f"(it has: {', '.join(names) or 'none'}); {DEMO_HINT}"
            )


def _user_refreshes(path: str, context: str | None) -> bool:
    """Whether the kubeconfig user of ``context`` (None: the current context) gets its token from
    something that hands out new ones (``exec``, ``auth-provider``). False for a static
    ``token``/``tokenFile``, a client certificate or basic auth; True when in doubt."""
    try:
        contexts, current = list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
        user_name = ((chosen or {}).get("context") or {}).get("user")
        if not user_name:
            return False  # no user: no token at all
        user = KubeConfigMerger(path).config["users"].get_with_name(user_name, safe=True)
        entry = (user.value.get("user") if user is not None else None) or {}
    except (ConfigException, KeyError, TypeError, AttributeError, OSError):
        return True
    return "exec" in entry or "auth-provider" in entry


def transport_identity(config: Configuration) -> tuple[object, ...]:
    """What the HTTP sessions are built from; when it changes they must be rebuilt."""
    return (
        config.host,
        config.ssl_ca_cert,
        config.cert_file,
        config.key_file,
        config.verify_ssl,
        config.proxy,
        getattr(config, "no_proxy", None),
        getattr(config, "tls_server_name", None),
    )


def tls_context(config: Configuration) -> ssl.SSLContext:
    """How the server is checked and usher shown to it: the CA (else the system's), the client
    certificate if any, nothing checked for ``insecure-skip-tls-verify``."""
    context = ssl.create_default_context(cafile=config.ssl_ca_cert or None)
    if config.cert_file:
        context.load_cert_chain(config.cert_file, config.key_file)
    if not config.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def proxy_url(config: Configuration) -> str | None:
    """The proxy for the API server, as ``kubernetes.client`` resolves it: the kubeconfig's
    ``proxy-url``, else ``HTTPS_PROXY``/``HTTP_PROXY`` for the server's scheme or ``ALL_PROXY``
    (recent versions of the library fill ``config.proxy`` from them; older ones leave it to the
    HTTP client, as httpx did), and none when ``NO_PROXY`` names the server. A proxy must speak
    HTTP or HTTPS (aiohttp has no SOCKS)."""
    proxies = urllib.request.getproxies_environment()
    server = urlsplit(str(config.host))
    proxy = config.proxy or proxies.get(server.scheme) or proxies.get("all") or None
    if proxy is None:
        return None
    no_proxy = getattr(config, "no_proxy", None)
    if _bypasses_proxy(server, proxies.get("no", "") if no_proxy is None else no_proxy):
        return None
    if "://" not in proxy:
        proxy = f"http://{proxy}"
    if urlsplit(proxy).scheme not in ("http", "https"):
        raise KubeConfigError(f"proxy {proxy} is not an HTTP or HTTPS proxy; {DEMO_HINT}")
    return proxy


def _bypasses_proxy(server: SplitResult, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` (``*``, host names and their subdomains, ``host:port``, addresses and
    networks) names the server, by the rules of ``kubernetes.client``."""
    host = (server.hostname or "").lower()
    if not host:
        return True
    netloc = server.netloc.lower().rpartition("@")[2]
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (entry.strip().lower() for entry in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
        entry = entry.lstrip(".")
        if entry in (host, netloc) or host.endswith("." + entry) or netloc.endswith("." + entry):
            return True
    return False
