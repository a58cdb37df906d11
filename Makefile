# make run   set up .venv (and missing Debian packages when root), then start the appliance
# make test  the same set-up, then the whole test suite
# make bench the benchmarks under tests/bench (printed, never asserted)
# make house the counts of issue 28: who names each capability, node-side writers, long rooms, import arrows
# make image [PROFILE=node]  the bootable disk image under build/images/ (as root; docs/image.md)

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# dnsutils (dig), curl, postgresql-client (psql): the README's walkthrough and its test
# (tests/cli/test_readme.py); nginx: the tests' real nginx; postgresql: the DBaaS tests' real PostgreSQL; pebble: the tests' ACME server (tests/secret/pebble.py);
# libvirt: the compute daemon's hypervisor (libvirt-dev and pkg-config build
# libvirt-python; iproute2 and openssh-client: the VM tests' network namespace,
# tests/compute/netns.py; openssh-server: the sshd binary of the second machine there,
# reached over qemu+ssh, which the tests start on their own; the package's service is
# not used); chromium and chromium-driver: the web console's browser tests
# (tests/console/, driven by Playwright from PyPI; never a browser download); the rest
# builds images and boots them (tests/image): dosfstools and mtools make the image's EFI
# system partition without mounting it, ovmf is the UEFI firmware the tests boot it with
DEBIAN_PACKAGES := dnsutils curl postgresql-client nginx libnginx-mod-stream postgresql wrk pebble mmdebstrap extlinux syslinux-common qemu-system-x86 qemu-utils \
	cloud-image-utils e2fsprogs fdisk util-linux mount ovmf mtools dosfstools \
	libvirt-dev pkg-config libvirt-daemon-system libvirt-clients dnsmasq-base iproute2 openssh-client openssh-server \
	chromium chromium-driver
# On Debian 12 these come from bookworm-backports (the suite is added to apt's sources
# when missing): Debian 12's QEMU 7.2 and libvirt 9.0 are below the spec's minimum (QEMU
# 8.2, libvirt 10.0), and QEMU 7.2's TCG panics one guest boot in about fifteen (a
# translation race QEMU 8.1 fixed) and boots the image ~25% slower (docs/testing.md).
# Each package that another one here needs at its exact version is named too: apt takes
# the rest from bookworm, so on a machine without libvirt, libvirt-daemon-system 11.3 and
# bookworm's libvirt-daemon-config-nwfilter 9.0 were "held broken packages"
BACKPORTS := bookworm-backports
BACKPORTS_PACKAGES := qemu-system-x86 qemu-system-common qemu-system-data qemu-utils seabios \
	libvirt0 libvirt-dev libvirt-daemon libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients \
	libvirt-daemon-config-nwfilter
PROFILE ?= appliance

export APPLIANCE_STATE_DIR ?= $(CURDIR)/var

.PHONY: run test bench house image setup debs clean

setup: debs $(STAMP)

# the packages' own services (nginx on :80, PostgreSQL's cluster on :5432, sshd on :22,
# libvirtd) are not started by the install: the tests start what they use, on loopback
# or in their namespaces (a policy-rc.d that refuses, only while apt runs, unless the
# machine has its own)
debs:
	@missing=""; for p in $(filter-out $(BACKPORTS_PACKAGES),$(DEBIAN_PACKAGES)); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if . /etc/os-release && [ "$$VERSION_CODENAME" = bookworm ] && ! { \
	    dpkg --compare-versions "$$(dpkg-query -W -f '$${Version}' qemu-system-x86 2>/dev/null)" ge 1:8.2 && \
	    dpkg --compare-versions "$$(dpkg-query -W -f '$${Version}' libvirt-daemon 2>/dev/null)" ge 10.0; }; then \
	  missing="$$missing $(addsuffix /$(BACKPORTS),$(BACKPORTS_PACKAGES))"; \
	  backports=/etc/apt/sources.list.d/appliance-$(BACKPORTS).sources; \
	  if [ "$$(id -u)" = 0 ] && ! grep -rqs '$(BACKPORTS)' /etc/apt/sources.list /etc/apt/sources.list.d; then \
	    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: $(BACKPORTS)\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > $$backports; fi; \
	else for p in $(BACKPORTS_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; guard=""; \
	    if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; guard=1; fi; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; rc=$$?; \
	    if [ -n "$$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi; exit $$rc; \
	  else echo "missing Debian packages (run as root to install):$$missing"; fi; \
	fi

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

run: setup
	$(VENV)/bin/appliance up

# the image tests, the other slow tests and the quick ones as three pytest runs side by side
# (tests/run_suite.py); each ends with its 40 slowest tests (--durations) and its time by
# directory
test: setup
	$(PY) -m tests.run_suite

bench: setup
	$(PY) -m tests.bench

house: setup
	$(PY) -m tests.house_counts

image: setup
	$(PY) image-build/build.py --profile $(PROFILE)

clean:
	rm -rf $(VENV) var

# the web console's front-end libraries, at the versions pinned in
# appliance/console/vendor-src/package-lock.json, copied to appliance/console/static/vendor/
.PHONY: console-vendor
console-vendor:
	cd appliance/console/vendor-src && npm ci --ignore-scripts --no-audit --no-fund && $(PYTHON) vendor.py
