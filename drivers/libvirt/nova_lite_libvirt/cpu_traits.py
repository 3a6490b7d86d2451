"""Host CPU features as os-traits ``HW_CPU_*`` names: the one table.

libvirt names x86 CPU features as its CPU map does (``avx2``, ``sse4.2``,
``pclmuldq``); the traits are os-traits' standard names.  The pairs are the
facts Nova's libvirt driver uses, so a flavor asking ``trait:HW_CPU_X86_AVX2
=required`` means the same here as there.  Two features give two traits
each, as in Nova: ``svm`` (``HW_CPU_X86_SVM`` and the vendor-specific
``HW_CPU_X86_AMD_SVM``) and ``vmx`` (``HW_CPU_X86_VMX`` and
``HW_CPU_X86_INTEL_VMX``).

The table is for x86 hosts only (:data:`X86_ARCHES`).  Nova has no table for
other architectures, and their feature names overlap x86's with other
meanings (an aarch64 host's ``aes`` is not AES-NI), so no CPU feature trait
is derived on them.
"""

import logging
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import os_traits as ot

LOG = logging.getLogger(__name__)

#: Architectures (canonical names) whose CPU features the table maps.
X86_ARCHES = frozenset({"x86_64", "i686"})

#: libvirt x86 CPU feature name -> the traits a host with it has.  Every name
#: is an os-traits constant, so an os-traits without one fails at import.
X86_FEATURE_TRAITS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "3dnow": (ot.HW_CPU_X86_3DNOW,),
    "abm": (ot.HW_CPU_X86_ABM,),
    "aes": (ot.HW_CPU_X86_AESNI,),
    "amx-bf16": (ot.HW_CPU_X86_AMXBF16,),
    "amx-int8": (ot.HW_CPU_X86_AMXINT8,),
    "amx-tile": (ot.HW_CPU_X86_AMXTILE,),
    "avx": (ot.HW_CPU_X86_AVX,),
    "avx2": (ot.HW_CPU_X86_AVX2,),
    "avx512-vpopcntdq": (ot.HW_CPU_X86_AVX512VPOPCNTDQ,),
    "avx512bitalg": (ot.HW_CPU_X86_AVX512BITALG,),
    "avx512bw": (ot.HW_CPU_X86_AVX512BW,),
    "avx512cd": (ot.HW_CPU_X86_AVX512CD,),
    "avx512dq": (ot.HW_CPU_X86_AVX512DQ,),
    "avx512er": (ot.HW_CPU_X86_AVX512ER,),
    "avx512f": (ot.HW_CPU_X86_AVX512F,),
    "avx512ifma": (ot.HW_CPU_X86_AVX512IFMA,),
    "avx512pf": (ot.HW_CPU_X86_AVX512PF,),
    "avx512vbmi": (ot.HW_CPU_X86_AVX512VBMI,),
    "avx512vbmi2": (ot.HW_CPU_X86_AVX512VBMI2,),
    "avx512vl": (ot.HW_CPU_X86_AVX512VL,),
    "avx512vnni": (ot.HW_CPU_X86_AVX512VNNI,),
    "bmi1": (ot.HW_CPU_X86_BMI,),
    "bmi2": (ot.HW_CPU_X86_BMI2,),
    "f16c": (ot.HW_CPU_X86_F16C,),
    "fma": (ot.HW_CPU_X86_FMA3,),
    "fma4": (ot.HW_CPU_X86_FMA4,),
    # os-traits files these three under AVX-512, as Nova maps them.
    "gfni": (ot.HW_CPU_X86_AVX512GFNI,),
    "mmx": (ot.HW_CPU_X86_MMX,),
    "mpx": (ot.HW_CPU_X86_MPX,),
    "pclmuldq": (ot.HW_CPU_X86_CLMUL,),
    "sha-ni": (ot.HW_CPU_X86_SHA,),
    "sse": (ot.HW_CPU_X86_SSE,),
    "sse2": (ot.HW_CPU_X86_SSE2,),
    "sse3": (ot.HW_CPU_X86_SSE3,),
    "sse4.1": (ot.HW_CPU_X86_SSE41,),
    "sse4.2": (ot.HW_CPU_X86_SSE42,),
    "sse4a": (ot.HW_CPU_X86_SSE4A,),
    "ssse3": (ot.HW_CPU_X86_SSSE3,),
    "svm": (ot.HW_CPU_X86_SVM, ot.HW_CPU_X86_AMD_SVM),
    "tbm": (ot.HW_CPU_X86_TBM,),
    "vaes": (ot.HW_CPU_X86_AVX512VAES,),
    "vmx": (ot.HW_CPU_X86_VMX, ot.HW_CPU_X86_INTEL_VMX),
    "vpclmulqdq": (ot.HW_CPU_X86_AVX512VPCLMULQDQ,),
    "xop": (ot.HW_CPU_X86_XOP,),
})


def cpu_feature_traits(arch: str, features: Iterable[str]) -> frozenset[str]:
    """The ``HW_CPU_*`` traits of a host CPU of ``arch`` with ``features``
    (libvirt's feature names).

    A feature the table does not name is not a trait; the names left out
    are logged at DEBUG.  On an architecture outside :data:`X86_ARCHES`
    there are none.
    """
    features = frozenset(features)
    if arch not in X86_ARCHES:
        if features:
            LOG.debug("No CPU feature traits for architecture %r (features %s)", arch,
                      ", ".join(sorted(features)))
        return frozenset()
    traits = frozenset(t for f in features for t in X86_FEATURE_TRAITS.get(f, ()))
    unmapped = features - X86_FEATURE_TRAITS.keys()
    if unmapped:
        LOG.debug("CPU features without a trait: %s", ", ".join(sorted(unmapped)))
    return traits
