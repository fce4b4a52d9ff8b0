package org.sparkdl.bridge;

import java.util.ArrayList;
import java.util.List;
import java.util.function.BinaryOperator;

/**
 * The fixed summation order of per-partition values: a binary tree over partition ids, as
 * sparkdl/step/tree_sum.py defines it (the reference, the Python reduce and this reduce use the same order).
 * A node {@code (lo, level)} covers partition ids {@code [lo, lo + 2^level)}; its value is its left child's plus
 * its right child's, a child without any contribution skipped. Nodes (leaves or pre-summed subtrees) are pushed
 * in increasing {@code lo}; only the O(log N) values of completed subtrees are kept.
 */
final class TreeSum<T> {
    /** A node and its value. */
    static final class Node<T> {
        final int lo;
        final int level;
        final T value;

        Node(int lo, int level, T value) {
            this.lo = lo;
            this.level = level;
            this.value = value;
        }

        long end() {
            return (long) lo + (1L << level);
        }
    }

    private final BinaryOperator<T> add;
    private final List<Node<T>> stack = new ArrayList<>();

    TreeSum(BinaryOperator<T> add) {
        this.add = add;
    }

    /** Add node {@code (lo, level)}: aligned, and past every node pushed before. */
    void push(int lo, int level, T value) {
        if (level < 0 || level > 31 || (lo & ((1L << level) - 1)) != 0) {
            throw new IllegalArgumentException("sparkdl bridge: tree node " + lo + " is not aligned to level " + level);
        }
        if (!stack.isEmpty() && lo < stack.get(stack.size() - 1).end()) {
            throw new IllegalArgumentException("sparkdl bridge: tree node " + lo + " overlaps or precedes the last one");
        }
        merge(lo);
        stack.add(new Node<>(lo, level, value));
    }

    /** Combine the two newest subtrees while their common ancestor ends at or before {@code before}. */
    private void merge(long before) {
        while (stack.size() >= 2) {
            Node<T> a = stack.get(stack.size() - 2);
            Node<T> b = stack.get(stack.size() - 1);
            int level = Math.max(a.level, b.level);
            while (((long) a.lo >> level) != ((long) b.lo >> level)) {
                level++;
            }
            int lo = (int) (((long) a.lo >> level) << level);
            if (lo + (1L << level) > before) {
                return;
            }
            stack.remove(stack.size() - 1);
            stack.set(stack.size() - 1, new Node<>(lo, level, add.apply(a.value, b.value)));
        }
    }

    /** The values combined as far as the pushed nodes allow (one node once everything is pushed). */
    List<Node<T>> nodes() {
        merge(Long.MAX_VALUE);
        return new ArrayList<>(stack);
    }

    /** The root's value, or null if nothing was pushed. */
    T result() {
        List<Node<T>> n = nodes();
        return n.isEmpty() ? null : n.get(0).value;
    }

    /**
     * The largest aligned nodes made of partitions that are {@code own} or {@code free} (contribute nothing
     * anywhere) and contain an own partition, in increasing {@code lo}; ids from {@code numLeaves} on are free.
     * Each is one pre-summed record of the task holding {@code own} (sparkdl/step/tree_sum.py maximal_nodes).
     */
    static List<int[]> maximalNodes(int[] own, boolean[] free, int numLeaves) {
        int top = 32 - Integer.numberOfLeadingZeros(Math.max(1, numLeaves - 1));
        int[] covered = new int[numLeaves + 1];  // prefix counts of own-or-free partitions
        boolean[] mine = new boolean[numLeaves];
        for (int p : own) {
            mine[p] = true;
        }
        for (int p = 0; p < numLeaves; p++) {
            covered[p + 1] = covered[p] + (mine[p] || free[p] ? 1 : 0);
        }
        List<int[]> out = new ArrayList<>();
        int[] sorted = own.clone();
        java.util.Arrays.sort(sorted);
        for (int p : sorted) {
            if (!out.isEmpty()) {
                int[] last = out.get(out.size() - 1);
                if (p < (long) last[0] + (1L << last[1])) {
                    continue;
                }
            }
            int level = 0;
            while (level < top) {
                int lo = (p >> (level + 1)) << (level + 1);
                int hi = (int) Math.min(numLeaves, (long) lo + (1L << (level + 1)));
                if (covered[hi] - covered[lo] != hi - lo) {
                    break;
                }
                level++;
            }
            out.add(new int[] {(p >> level) << level, level});
        }
        return out;
    }
}
