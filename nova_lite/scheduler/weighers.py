"""Host weighers: higher is better; the default spreads by free RAM then vCPUs."""


def ram_weigher(host_state):
    """Free memory in MB (spread: emptier hosts first)."""
    return host_state.free.get("MEMORY_MB", 0)


def cpu_weigher(host_state):
    """Free vCPUs."""
    return host_state.free.get("VCPU", 0)


DEFAULT_WEIGHERS = ((ram_weigher, 1.0), (cpu_weigher, 1.0))


def weigh(host_states, weighers=DEFAULT_WEIGHERS):
    """Hosts sorted best first; each weigher's values are normalised to 0..1."""
    hosts = list(host_states)
    totals = [0.0] * len(hosts)
    for weigher, multiplier in weighers:
        values = [weigher(h) for h in hosts]
        low, high = (min(values), max(values)) if values else (0, 0)
        span = (high - low) or 1
        for i, value in enumerate(values):
            totals[i] += multiplier * (value - low) / span
    order = sorted(range(len(hosts)), key=lambda i: (-totals[i], hosts[i].host,
                                                     hosts[i].nodename))
    return [hosts[i] for i in order]
