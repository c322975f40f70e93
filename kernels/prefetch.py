"""A cache-line prefetch hint for kernels (LLVM's llvm.prefetch).

The prefix-cache hash table is megabytes per replica and probed at random: a lookup costs a
cache miss. Where the next keys are known ahead (the blocks of a request registered in one
call, the blocks about to be taken from the free list), asking for their cells a few
iterations early overlaps those misses.
"""

from llvmlite import ir
from numba import config, types
from numba.core import cgutils
from numba.extending import intrinsic

_READ = 0
_KEEP_IN_ALL_LEVELS = 3
_DATA_CACHE = 1


@intrinsic
def prefetch_nb(typingctx, arr, index):
    """Hint that arr[index] (index: a tuple with one int per dimension) will be read soon.
    No effect on results; the index must be in bounds.

    Mutates: nothing.
    Returns: nothing.
    """
    sig = types.void(arr, index)

    def codegen(context, builder, signature, args):
        aryty, idxty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        parts = cgutils.unpack_tuple(builder, args[1], len(idxty))
        idx = [context.cast(builder, a, t, types.intp) for a, t in zip(parts, idxty, strict=True)]
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        flags = [ir.Constant(i32, v) for v in (_READ, _KEEP_IN_ALL_LEVELS, _DATA_CACHE)]
        builder.call(fn, [builder.bitcast(ptr, i8p), *flags])
        return context.get_dummy_value()

    return sig, codegen


if config.DISABLE_JIT:
    # kernels run as plain Python (NUMBA_DISABLE_JIT=1): an intrinsic is not callable there

    def prefetch_nb(arr, index):  # noqa: F811 - the plain-Python stand-in
        """No-op stand-in for the prefetch hint when kernels run as plain Python.

        Mutates: nothing.
        Returns: nothing.
        """
