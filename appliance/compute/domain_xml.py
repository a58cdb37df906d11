"""The libvirt domain XML of a node (pure: values in, XML text out), and the reading of
our mark back out of a domain's XML.

The mark `<metadata><appliance:node xmlns:appliance=NS uuid=... image=... reboot=.../>`
says "this domain is ours, for that node"; `image` is the URL the root overlay was made
from (an image change replaces the overlay), `reboot` the last `reboot_requested_at`
honoured (so a restarted daemon does not reboot again).
"""

import xml.etree.ElementTree as ET

NS = "https://appliance.local/ns/node"
PREFIX = "appliance"


def domain_type(accel):
    """'kvm' only where KVM was seen to really run a guest; TCG ('qemu') otherwise."""
    return "kvm" if accel == "kvm" else "qemu"


def mark_xml(node_uuid, image=None, reboot=None, bare=False):
    """The mark element; `bare` without its namespace, as virDomainSetMetadata wants it
    (libvirt adds the namespace it is given)."""
    attrs = {"uuid": node_uuid}
    if image:
        attrs["image"] = image
    if reboot:
        attrs["reboot"] = reboot
    el = ET.Element("node" if bare else f"{{{NS}}}node", attrs)
    ET.register_namespace(PREFIX, NS)
    return ET.tostring(el, encoding="unicode")


def build(node, name, accel, disks, port, network_name, console_path, image=None,
          reboot=None):
    """`disks`: [{"path", "dev" (vda...), "format" (qcow2|raw), "device" (disk|cdrom)}];
    `port`: the node's port (its `mac`); `network_name`: the libvirt network of the port's
    network, or None to attach to the network's bridge by name (`port["bridge"]`)."""
    ET.register_namespace(PREFIX, NS)
    dom = ET.Element("domain", type=domain_type(accel))
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "uuid").text = node["uuid"]
    ET.SubElement(dom, "title").text = (node.get("name") or "")[:255] or node["uuid"]
    meta = ET.SubElement(dom, "metadata")
    meta.append(ET.fromstring(mark_xml(node["uuid"], image, reboot)))
    ET.SubElement(dom, "memory", unit="MiB").text = str(int(node["ram"]))
    ET.SubElement(dom, "vcpu").text = str(int(node["cores"]))
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type", arch="x86_64", machine="pc").text = "hvm"
    ET.SubElement(os_el, "boot", dev="hd")
    feats = ET.SubElement(dom, "features")
    ET.SubElement(feats, "acpi")
    ET.SubElement(feats, "apic")
    if accel == "kvm":
        ET.SubElement(dom, "cpu", mode="host-passthrough")
    ET.SubElement(dom, "on_poweroff").text = "destroy"
    ET.SubElement(dom, "on_reboot").text = "restart"
    ET.SubElement(dom, "on_crash").text = "destroy"
    devices = ET.SubElement(dom, "devices")
    for disk in disks:
        devices.append(disk_element(disk))
    if port is not None:
        if network_name:
            iface = ET.SubElement(devices, "interface", type="network")
            ET.SubElement(iface, "source", network=network_name)
        else:
            iface = ET.SubElement(devices, "interface", type="bridge")
            ET.SubElement(iface, "source", bridge=port["bridge"])
        ET.SubElement(iface, "mac", address=port["mac"])
        ET.SubElement(iface, "model", type="virtio")
    # the serial log is the console the CLI prints and where the ready marker shows up;
    # the pty keeps `virsh console` working alongside it. No console_path: the domain
    # runs on another machine (qemu+ssh), where the appliance's state directory is not:
    # a pty only (a file there would not be ours to read, and its directory is missing)
    if console_path is None:
        pty = ET.SubElement(devices, "serial", type="pty")
        ET.SubElement(pty, "target", port="0")
        ET.SubElement(ET.SubElement(devices, "console", type="pty"), "target",
                      type="serial", port="0")
    else:
        serial = ET.SubElement(devices, "serial", type="file")
        ET.SubElement(serial, "source", path=console_path, append="on")
        ET.SubElement(serial, "target", port="0")
        pty = ET.SubElement(devices, "serial", type="pty")
        ET.SubElement(pty, "target", port="1")
        console = ET.SubElement(devices, "console", type="file")
        ET.SubElement(console, "source", path=console_path, append="on")
        ET.SubElement(console, "target", type="serial", port="0")
    ET.SubElement(devices, "rng", model="virtio").append(
        _el("backend", {"model": "random"}, "/dev/urandom"))
    return ET.tostring(dom, encoding="unicode")


def disk_element(disk):
    device = disk.get("device", "disk")
    el = ET.Element("disk", type="file", device=device)
    ET.SubElement(el, "driver", name="qemu", type=disk.get("format", "qcow2"))
    ET.SubElement(el, "source", file=disk["path"])
    if device == "cdrom":
        # IDE, not SATA: the node image's cloud kernel has no AHCI driver (CONFIG_SATA_AHCI
        # is not set), so a SATA seed is never seen and cloud-init runs without it
        ET.SubElement(el, "target", dev=disk["dev"], bus="ide")
        ET.SubElement(el, "readonly")
    else:
        ET.SubElement(el, "target", dev=disk["dev"], bus="virtio")
    if disk.get("serial"):
        ET.SubElement(el, "serial").text = disk["serial"]
    return el


def disk_xml(disk):
    return ET.tostring(disk_element(disk), encoding="unicode")


def _el(tag, attrs, text):
    el = ET.Element(tag, attrs)
    el.text = text
    return el


def read_mark(domain_xml):
    """The mark's attributes ({"uuid", "image"?, "reboot"?}) of a domain's XML, or None
    for a domain that is not ours."""
    try:
        root = ET.fromstring(domain_xml)
    except ET.ParseError:
        return None
    el = root.find(f"metadata/{{{NS}}}node")
    if el is None or not el.get("uuid"):
        return None
    return dict(el.attrib)


def disks_of(domain_xml):
    """{target dev: source path} of a domain's disks."""
    root = ET.fromstring(domain_xml)
    out = {}
    for disk in root.findall("devices/disk"):
        target, source = disk.find("target"), disk.find("source")
        if target is not None:
            out[target.get("dev")] = None if source is None else source.get("file")
    return out


def shape_of(domain_xml):
    """(vcpus, memory MiB) a domain's XML defines."""
    root = ET.fromstring(domain_xml)
    mem = root.find("memory")
    kib = int(mem.text) * {"KiB": 1, "MiB": 1024, "GiB": 1024 * 1024}.get(
        mem.get("unit", "KiB"), 1)
    return int(root.find("vcpu").text), kib // 1024
