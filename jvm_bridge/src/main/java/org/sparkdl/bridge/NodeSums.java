package org.sparkdl.bridge;

import java.util.Comparator;
import java.util.List;

/**
 * Gradient and buffer records summed in the tree order of {@link TreeSum}: by a reduce task, the driver, or a
 * combine task that sends the partial sums on. A value keeps its record's bytes until it takes part in a sum,
 * so a record that is summed with nothing passes through unchanged (a float16 leaf stays float16).
 */
final class NodeSums {
    private static final Comparator<byte[]> BY_LO = Comparator.comparingInt(Frames::partition);

    /** A node's value: a record not yet summed ({@code raw}), or float32 sums. */
    static final class Value {
        byte[] raw;
        float[] values;
        double loss;
        double normalizer;
        long count;

        Value(byte[] record) {
            raw = record;
            loss = Frames.loss(record);
            normalizer = Frames.normalizer(record);
            count = Frames.count(record);
        }

        float[] values() {
            if (values == null) {
                values = Frames.values(raw);
                raw = null;
            }
            return values;
        }
    }

    private NodeSums() {
    }

    /**
     * {@code a + b} in float32, element by element (no fusion), the loss, normalizer and count likewise. A record
     * not yet summed is added straight from its bytes and released: no float copy of it is made.
     */
    static Value add(Value a, Value b) {
        float[] x = a.values();
        if (b.raw != null) {
            Frames.addPayload(b.raw, x);
            b.raw = null;
        } else {
            float[] y = b.values;
            if (x.length != y.length) {
                throw new IllegalArgumentException("sparkdl bridge: records of " + x.length + " and " + y.length
                        + " values in one sum");
            }
            for (int i = 0; i < x.length; i++) {
                x[i] += y[i];
            }
        }
        a.loss += b.loss;
        a.normalizer += b.normalizer;
        a.count += b.count;
        return a;
    }

    /**
     * The records' tree sum as far as they allow: one node when they are all of a subtree's records. Takes the
     * records: {@code records} is emptied, so that each record's bytes are released once summed (a block of a
     * large model is hundreds of MB per record).
     */
    static List<TreeSum.Node<Value>> sum(List<byte[]> records) {
        byte[][] sorted = records.toArray(new byte[0][]);
        records.clear();
        java.util.Arrays.sort(sorted, BY_LO);
        TreeSum<Value> tree = new TreeSum<>(NodeSums::add);
        for (int i = 0; i < sorted.length; i++) {
            byte[] f = sorted[i];
            sorted[i] = null;
            tree.push(Frames.partition(f), Frames.level(f), new Value(f));
        }
        return tree.nodes();
    }

    /** The root of the records' tree (emptying {@code records}, see {@link #sum}), or null without records. */
    static Value root(List<byte[]> records) {
        List<TreeSum.Node<Value>> nodes = sum(records);
        return nodes.isEmpty() ? null : nodes.get(0).value;
    }

    /** The record of node {@code n} of records of {@code kind} for {@code block}. */
    static byte[] record(TreeSum.Node<Value> n, int kind, int block) {
        Value v = n.value;
        if (v.raw != null) {
            return v.raw;
        }
        return Frames.record(kind, block, n.lo, n.level, v.loss, v.normalizer, v.count, v.values);
    }
}
