package org.sparkdl.bridge;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.api.java.function.Function;
import org.apache.spark.api.java.function.PairFunction;
import org.apache.spark.broadcast.Broadcast;

import scala.Tuple2;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * {@code rdd.collect()} for the per-iteration job, without Spark's ClosureCleaner cost. {@code collect()} passes
 * a Scala lambda to {@code runJob}, and the cleaner parses the bytecode of that lambda's enclosing class (RDD,
 * read from the spark-core jar with ASM) on every call: 5-10 ms per iteration with the C1 JIT (a JFR profile of the
 * driver). {@code runJob} with named function classes is left alone, and the result is the same. The same holds
 * for {@code map}/{@code mapToPair}: the per-iteration jobs pass them named classes ({@link KeyByBlock},
 * {@link ResultOf}), not lambdas.
 */
final class Jobs {
    private Jobs() {
    }

    /** Every record of {@code rdd}, in partition order then record order (as {@code collect()}). */
    @SuppressWarnings("unchecked")
    static <T> List<T> collect(JavaSparkContext jsc, JavaRDD<T> rdd) {
        int n = rdd.getNumPartitions();
        Object[][] parts = new Object[n][];
        List<Object> indices = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            indices.add(i);
        }
        jsc.sc().runJob(rdd.rdd(), new PartitionRecords<T>(), CollectionConverters.asScala(indices).toSeq(),
                new Store(parts), ClassTag$.MODULE$.apply(Object[].class));
        List<T> out = new ArrayList<>();
        for (Object[] p : parts) {
            for (Object r : p) {
                out.add((T) r);
            }
        }
        return out;
    }

    /** In a task: the partition's records as an array. */
    static final class PartitionRecords<T> extends AbstractFunction2<TaskContext, Iterator<T>, Object[]>
            implements Serializable {
        private static final long serialVersionUID = 1L;

        @Override
        public Object[] apply(TaskContext context, Iterator<T> records) {
            List<Object> out = new ArrayList<>();
            while (records.hasNext()) {
                out.add(records.next());
            }
            return out.toArray();
        }
    }

    /** On the driver: keeps each partition's result at its index. */
    private static final class Store extends AbstractFunction2<Object, Object[], BoxedUnit> {
        private final Object[][] parts;

        Store(Object[][] parts) {
            this.parts = parts;
        }

        @Override
        public BoxedUnit apply(Object index, Object[] records) {
            parts[(Integer) index] = records;
            return BoxedUnit.UNIT;
        }
    }

    /** A gradient record keyed by its AllReduce block (the reduce-in-tasks shuffle). */
    static final class KeyByBlock implements PairFunction<byte[], Integer, byte[]> {
        private static final long serialVersionUID = 1L;

        @Override
        public Tuple2<Integer, byte[]> call(byte[] frame) {
            return new Tuple2<>(Frames.block(frame), frame);
        }
    }

    /** A gradient record keyed by its ancestor node at {@code level} of the summation tree (the combine stage). */
    static final class KeyByNode implements PairFunction<byte[], Integer, byte[]> {
        private static final long serialVersionUID = 1L;
        private final int level;

        KeyByNode(int level) {
            this.level = level;
        }

        @Override
        public Tuple2<Integer, byte[]> call(byte[] frame) {
            return new Tuple2<>(Frames.partition(frame) >> level, frame);
        }
    }

    /**
     * A combine task: the records of one tree node (all of them: the key is the node), summed in the tree's order
     * ({@link NodeSums}) into one gradient record and one buffers record; MISS records pass through.
     */
    static final class Combine implements FlatMapFunction<java.util.Iterator<Tuple2<Integer, byte[]>>, byte[]> {
        private static final long serialVersionUID = 1L;

        @Override
        public java.util.Iterator<byte[]> call(java.util.Iterator<Tuple2<Integer, byte[]>> records) {
            List<byte[]> grads = new ArrayList<>();
            List<byte[]> buffers = new ArrayList<>();
            List<byte[]> out = new ArrayList<>();
            while (records.hasNext()) {
                byte[] f = records.next()._2();
                int kind = Frames.kind(f);
                if (Frames.block(f) != 0) {
                    throw new IllegalArgumentException("sparkdl bridge: the combine stage takes one block");
                }
                (Frames.isGradient(kind) ? grads : kind == Frames.BUFFERS ? buffers : out).add(f);
            }
            for (TreeSum.Node<NodeSums.Value> n : NodeSums.sum(grads)) {
                out.add(NodeSums.record(n, Frames.GRAD, 0));
            }
            for (TreeSum.Node<NodeSums.Value> n : NodeSums.sum(buffers)) {
                out.add(NodeSums.record(n, Frames.BUFFERS, 0));
            }
            return out.iterator();
        }
    }

    /** Block k's optimizer state from the k-th broadcast ({@link TrainingLoop#commitStates}). */
    static final class StateOf implements Function<Integer, ShardState> {
        private static final long serialVersionUID = 1L;
        private final List<Broadcast<ShardState>> sources;

        StateOf(List<Broadcast<ShardState>> sources) {
            this.sources = sources;
        }

        @Override
        public ShardState call(Integer block) {
            return sources.get(block).value().expand();
        }
    }

    /** A cached shard state without the iteration's result (the new shard's weights): for reading the states. */
    static final class StateOnly implements Function<ShardState, ShardState> {
        private static final long serialVersionUID = 1L;

        @Override
        public ShardState call(ShardState state) {
            return new ShardState(state.block, state.step, state.arrays);
        }
    }

    /** What a reduce task's new shard state sends to the driver ({@link ShardState#result()}). */
    static final class ResultOf implements Function<ShardState, ShardState> {
        private static final long serialVersionUID = 1L;

        @Override
        public ShardState call(ShardState state) {
            return state.result();
        }
    }
}
