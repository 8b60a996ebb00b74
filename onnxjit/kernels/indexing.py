"""Numba kernels of the indexing ops: TopK's selection, Unique's ordered map for keys that hold NaN, and scatter
with a reduction.

TopK and Unique follow onnxruntime's CPU kernels step by step, because where the ordering of the keys is not a
strict weak ordering (NaN) or the output order is left open by the spec (TopK with sorted=0) the result is whatever
their algorithm gives:
  * TopK (onnxruntime/core/providers/cpu/math/top_k.cc): a linear scan for k == 1, a binary heap for small k,
    else `std::nth_element` and, when sorted, `std::sort` from libstdc++ (introselect / introsort), reproduced
    here over the row's positions with onnxruntime's comparator (value, then lower position first).
  * Unique (onnxruntime/core/providers/cpu/tensor/unique.cc) inserts keys into a `std::map`; with NaN among the
    keys what is found equal depends on the red-black tree's shape, so `unique_map` replays libstdc++'s tree.
Keys arrive as float64 holding the same order, equalities and NaN as the data (integers beyond 2**53 as their
ranks), so TopK and Unique compile once each; the comparator is `>` (TopK's smallest negates the keys).
"""
from __future__ import annotations

import math

import numpy as np

from onnxjit.cache.jit import njit

# --- TopK -----------------------------------------------------------------------------------------------------


@njit(cache=True)
def _cmp(v, a, b):
    """onnxruntime's GreaterValueCmp on positions a, b of the row v (LesserValueCmp is this on negated keys)."""
    va = v[a]
    vb = v[b]
    return va > vb or (va == vb and a < b)


@njit(cache=True)
def _heapify_ith(v, heap, i, k):
    """onnxruntime's HeapifyIthPosition: push heap[i] down a heap of size k whose root is the weakest."""
    while True:
        left = 2 * i + 1
        right = left + 1
        if right < k:
            i_replaces_left = _cmp(v, heap[i], heap[left])
            if i_replaces_left and _cmp(v, heap[right], heap[left]):
                t = heap[i]
                heap[i] = heap[left]
                heap[left] = t
                i = left
            elif i_replaces_left or _cmp(v, heap[i], heap[right]):
                t = heap[i]
                heap[i] = heap[right]
                heap[right] = t
                i = right
            else:
                break
        elif left < k and _cmp(v, heap[i], heap[left]):
            t = heap[i]
            heap[i] = heap[left]
            heap[left] = t
            i = left
        else:
            break


# libstdc++ algorithms over h[first:last] with the comparator comp(h[x], h[y]) = _cmp(v, h[x], h[y]).
# The "unguarded" loops carry a bound that a consistent comparator never reaches (NaN can break the ordering).

@njit(cache=True)
def _push_heap(v, h, first, hole, top, value):
    parent = (hole - 1) // 2
    while hole > top and _cmp(v, h[first + parent], value):
        h[first + hole] = h[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    h[first + hole] = value


@njit(cache=True)
def _adjust_heap(v, h, first, hole, length, value):
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if _cmp(v, h[first + child], h[first + child - 1]):
            child -= 1
        h[first + hole] = h[first + child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        h[first + hole] = h[first + child - 1]
        hole = child - 1
    _push_heap(v, h, first, hole, top, value)


@njit(cache=True)
def _make_heap(v, h, first, last):
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(v, h, first, parent, length, h[first + parent])
        if parent == 0:
            return
        parent -= 1


@njit(cache=True)
def _pop_heap(v, h, first, last, result):
    value = h[result]
    h[result] = h[first]
    _adjust_heap(v, h, first, 0, last - first, value)


@njit(cache=True)
def _heap_select(v, h, first, middle, last):
    _make_heap(v, h, first, middle)
    for i in range(middle, last):
        if _cmp(v, h[i], h[first]):
            _pop_heap(v, h, first, middle, i)


@njit(cache=True)
def _sort_heap(v, h, first, last):
    while last - first > 1:
        last -= 1
        _pop_heap(v, h, first, last, last)


@njit(cache=True)
def _move_median_to_first(v, h, result, a, b, c):
    if _cmp(v, h[a], h[b]):
        if _cmp(v, h[b], h[c]):
            s = b
        elif _cmp(v, h[a], h[c]):
            s = c
        else:
            s = a
    elif _cmp(v, h[a], h[c]):
        s = a
    elif _cmp(v, h[b], h[c]):
        s = c
    else:
        s = b
    t = h[result]
    h[result] = h[s]
    h[s] = t


@njit(cache=True)
def _partition_pivot(v, h, first, last):
    mid = first + (last - first) // 2
    _move_median_to_first(v, h, first, first + 1, mid, last - 1)
    pivot = h[first]
    lo = first + 1
    hi = last
    while True:
        while lo < last - 1 and _cmp(v, h[lo], pivot):
            lo += 1
        hi -= 1
        while hi > first and _cmp(v, pivot, h[hi]):
            hi -= 1
        if not lo < hi:
            return lo
        t = h[lo]
        h[lo] = h[hi]
        h[hi] = t
        lo += 1


@njit(cache=True)
def _linear_insert(v, h, last, lowest):
    val = h[last]
    nxt = last - 1
    while nxt >= lowest and _cmp(v, val, h[nxt]):
        h[last] = h[nxt]
        last = nxt
        nxt -= 1
    h[last] = val


@njit(cache=True)
def _insertion_sort(v, h, first, last):
    if first == last:
        return
    for i in range(first + 1, last):
        if _cmp(v, h[i], h[first]):
            val = h[i]
            for j in range(i, first, -1):
                h[j] = h[j - 1]
            h[first] = val
        else:
            _linear_insert(v, h, i, first)


@njit(cache=True)
def _lg(n):
    r = 0
    while n > 1:
        n >>= 1
        r += 1
    return r


@njit(cache=True)
def _nth_element(v, h, first, nth, last):
    """std::nth_element (libstdc++ __introselect)."""
    depth = 2 * _lg(last - first)
    while last - first > 3:
        if depth == 0:
            _heap_select(v, h, first, nth + 1, last)
            t = h[first]
            h[first] = h[nth]
            h[nth] = t
            return
        depth -= 1
        cut = _partition_pivot(v, h, first, last)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(v, h, first, last)


@njit(cache=True)
def _std_sort(v, h, first, last):
    """std::sort (libstdc++ __introsort_loop + __final_insertion_sort); the recursion runs off a stack, which
    changes nothing as the ranges it works on are disjoint."""
    if first == last:
        return
    stack = np.empty((130, 3), np.int64)
    top = 0
    stack[0, 0] = first
    stack[0, 1] = last
    stack[0, 2] = 2 * _lg(last - first)
    top = 1
    while top > 0:
        top -= 1
        lo = stack[top, 0]
        hi = stack[top, 1]
        depth = stack[top, 2]
        while hi - lo > 16:
            if depth == 0:
                _heap_select(v, h, lo, hi, hi)
                _sort_heap(v, h, lo, hi)
                break
            depth -= 1
            cut = _partition_pivot(v, h, lo, hi)
            stack[top, 0] = cut
            stack[top, 1] = hi
            stack[top, 2] = depth
            top += 1
            hi = cut
    if last - first > 16:
        _insertion_sort(v, h, first, first + 16)
        for i in range(first + 16, last):
            _linear_insert(v, h, i, first)
    else:
        _insertion_sort(v, h, first, last)


@njit(cache=True, nogil=True)
def topk(vals, k, sorted_, out):
    """The positions of the k largest of each row of vals (R, n) into out (R, k), as onnxruntime's TopK picks and
    orders them (the k smallest: pass the keys negated, which keeps ties, NaN and the comparisons' outcomes)."""
    n = vals.shape[1]
    if k == 0:
        return
    use_heap = k != 1 and (k < 4 or (math.log2(k) / math.log2(n)) < 0.725)
    holder = np.empty(n, np.int64)
    heap = np.empty(k, np.int64)
    for r in range(vals.shape[0]):
        v = vals[r]
        o = out[r]
        if k == 1:
            best = v[0]
            top = 0
            for j in range(1, n):
                if v[j] > best:
                    best = v[j]
                    top = j
            o[0] = top
        elif use_heap:
            for j in range(k):
                heap[k - j - 1] = j
                _heapify_ith(v, heap, k - j - 1, k)
            top_val = v[heap[0]]
            for j in range(k, n):
                if v[j] > top_val:
                    heap[0] = j
                    _heapify_ith(v, heap, 0, k)
                    top_val = v[heap[0]]
            if sorted_:
                for j in range(k):
                    o[k - j - 1] = heap[0]
                    heap[0] = heap[k - j - 1]
                    _heapify_ith(v, heap, 0, k - j - 1)
            else:
                for j in range(k):
                    o[j] = heap[j]
        else:
            for j in range(n):
                holder[j] = j
            _nth_element(v, holder, 0, k - 1, n)
            if sorted_:
                _std_sort(v, holder, 0, k)
            for j in range(k):
                o[j] = holder[j]


# --- Unique: libstdc++'s std::map --------------------------------------------------------------------------------

@njit(cache=True)
def _row_less(keys, a, b):
    """std::vector's operator< on rows a, b of keys, as C++20 defines it (onnxruntime builds with C++20): a
    three-way lexicographic compare that stops at the first pair not equal, where an unordered pair (NaN) makes
    the rows equivalent."""
    for j in range(keys.shape[1]):
        x = keys[a, j]
        y = keys[b, j]
        if x < y:
            return True
        if not x == y:  # greater, or unordered
            return False
    return False


@njit(cache=True)
def _rotate_left(x, left, right, parent):
    y = right[x]
    right[x] = left[y]
    if left[y] != -1:
        parent[left[y]] = x
    parent[y] = parent[x]
    if parent[0] == x:  # x was the root (header.parent)
        parent[0] = y
    elif x == left[parent[x]]:
        left[parent[x]] = y
    else:
        right[parent[x]] = y
    left[y] = x
    parent[x] = y


@njit(cache=True)
def _rotate_right(x, left, right, parent):
    y = left[x]
    left[x] = right[y]
    if right[y] != -1:
        parent[right[y]] = x
    parent[y] = parent[x]
    if parent[0] == x:
        parent[0] = y
    elif x == right[parent[x]]:
        right[parent[x]] = y
    else:
        left[parent[x]] = y
    right[y] = x
    parent[x] = y


@njit(cache=True)
def _insert_rebalance(insert_left, x, p, left, right, parent, red):
    """_Rb_tree_insert_and_rebalance; node 0 is the header (parent: root, left: leftmost, right: rightmost)."""
    parent[x] = p
    left[x] = -1
    right[x] = -1
    red[x] = True
    if insert_left:
        left[p] = x
        if p == 0:
            parent[0] = x
            right[0] = x
        elif p == left[0]:
            left[0] = x
    else:
        right[p] = x
        if p == right[0]:
            right[0] = x
    while x != parent[0] and red[parent[x]]:
        xp = parent[x]
        xpp = parent[xp]
        if xp == left[xpp]:
            y = right[xpp]
            if y != -1 and red[y]:
                red[xp] = False
                red[y] = False
                red[xpp] = True
                x = xpp
            else:
                if x == right[xp]:
                    x = xp
                    _rotate_left(x, left, right, parent)
                red[parent[x]] = False
                red[xpp] = True
                _rotate_right(xpp, left, right, parent)
        else:
            y = left[xpp]
            if y != -1 and red[y]:
                red[xp] = False
                red[y] = False
                red[xpp] = True
                x = xpp
            else:
                if x == left[xp]:
                    x = xp
                    _rotate_right(x, left, right, parent)
                red[parent[x]] = False
                red[xpp] = True
                _rotate_left(xpp, left, right, parent)
    red[parent[0]] = False


@njit(cache=True)
def _increment(x, left, right, parent):
    if right[x] != -1:
        x = right[x]
        while left[x] != -1:
            x = left[x]
        return x
    y = parent[x]
    while x == right[y]:
        x = y
        y = parent[y]
    if right[x] != y:
        x = y
    return x


@njit(cache=True)
def _decrement(x, left, right, parent, red):
    if red[x] and parent[parent[x]] == x:  # the header
        return right[x]
    if left[x] != -1:
        y = left[x]
        while right[y] != -1:
            y = right[y]
        return y
    y = parent[x]
    while x == left[y]:
        x = y
        y = parent[y]
    return y


@njit(cache=True)
def unique_map(keys):
    """Replays onnxruntime's Unique over the rows of keys (n, m): a std::map from key to the id of its first
    occurrence. Returns (ids: the id of each row, first: first row of each id, counts, order: ids in the map's
    order, n_unique, n_order)."""
    n = keys.shape[0]
    left = np.full(n + 1, -1, np.int64)
    right = np.full(n + 1, -1, np.int64)
    parent = np.full(n + 1, -1, np.int64)
    red = np.zeros(n + 1, np.bool_)
    node_row = np.zeros(n + 1, np.int64)  # the row holding the key of each tree node
    node_id = np.zeros(n + 1, np.int64)
    red[0] = True
    left[0] = 0
    right[0] = 0
    ids = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    counts = np.zeros(n, np.int64)
    n_nodes = 0
    n_unique = 0
    for i in range(n):
        # find(): lower_bound, then equal unless key < found
        y = 0
        x = parent[0] if n_nodes > 0 else -1
        while x != -1:
            if not _row_less(keys, node_row[x], i):
                y = x
                x = left[x]
            else:
                x = right[x]
        if y != 0 and not _row_less(keys, i, node_row[y]):
            u = node_id[y]
            ids[i] = u
            counts[u] += 1
            continue
        # operator[]: emplace with the lower_bound y as hint (_M_get_insert_hint_unique_pos)
        pos = y
        ins_x = -1
        ins_p = -1
        full_search = False
        equal_node = -1
        if pos == 0:
            if n_nodes > 0 and _row_less(keys, node_row[right[0]], i):
                ins_p = right[0]
            else:
                full_search = True
        elif _row_less(keys, i, node_row[pos]):
            if pos == left[0]:
                ins_x = pos
                ins_p = pos
            else:
                before = _decrement(pos, left, right, parent, red)
                if _row_less(keys, node_row[before], i):
                    if right[before] == -1:
                        ins_p = before
                    else:
                        ins_x = pos
                        ins_p = pos
                else:
                    full_search = True
        elif _row_less(keys, node_row[pos], i):
            if pos == right[0]:
                ins_p = right[0]
            else:
                after = _increment(pos, left, right, parent)
                if _row_less(keys, i, node_row[after]):
                    if right[pos] == -1:
                        ins_p = pos
                    else:
                        ins_x = after
                        ins_p = after
                else:
                    full_search = True
        else:
            equal_node = pos
        if full_search:  # _M_get_insert_unique_pos
            x = parent[0] if n_nodes > 0 else -1
            yy = 0
            comp = True
            while x != -1:
                yy = x
                comp = _row_less(keys, i, node_row[x])
                x = left[x] if comp else right[x]
            j = yy
            done = False
            if comp:
                if j == left[0]:
                    ins_p = yy
                    done = True
                else:
                    j = _decrement(j, left, right, parent, red)
            if not done:
                if _row_less(keys, node_row[j], i):
                    ins_p = yy
                else:
                    equal_node = j
        if equal_node != -1:  # an equivalent key after all: count the row there
            u = node_id[equal_node]
            ids[i] = u
            counts[u] += 1
            continue
        n_nodes += 1
        z = n_nodes
        node_row[z] = i
        node_id[z] = n_unique
        insert_left = ins_x != -1 or ins_p == 0 or _row_less(keys, i, node_row[ins_p])
        _insert_rebalance(insert_left, z, ins_p, left, right, parent, red)
        ids[i] = n_unique
        first[n_unique] = i
        counts[n_unique] = 1
        n_unique += 1
    order = np.empty(n_nodes, np.int64)
    x = left[0]
    k = 0
    while x != 0 and k < n_nodes:
        order[k] = node_id[x]
        k += 1
        x = _increment(x, left, right, parent)
    return ids, first[:n_unique], counts[:n_unique], order[:k]


# --- scatter with a reduction -------------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def scatter_reduce(out, rows, upd, op):
    """out[rows[i], :] = out[rows[i], :] <op> upd[i, :] in order of i; op 1 add, 2 mul, 3 max, 4 min, where max
    and min keep the current value only when it is strictly greater (smaller), as onnxruntime does (a NaN update
    replaces, a NaN in place stays until an update replaces it)."""
    m = out.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(m):
            a = out[r, j]
            b = upd[i, j]
            if op == 1:
                out[r, j] = a + b
            elif op == 2:
                out[r, j] = a * b
            elif op == 3:
                out[r, j] = a if a > b else b
            else:
                out[r, j] = a if a < b else b
