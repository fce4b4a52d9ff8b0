package org.sparkdl.bridge;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * {@code rdd.collect()} for the per-iteration job, without Spark's ClosureCleaner cost. {@code collect()} passes
 * a Scala lambda to {@code runJob}, and the cleaner parses the bytecode of that lambda's enclosing class (RDD,
 * read from the spark-core jar with ASM) on every call: 5-10 ms per iteration with the C1 JIT (a JFR profile of the
 * driver). {@code runJob} with named function classes is left alone, and the result is the same.
 */
final class Jobs {
    private Jobs() {
    }

    /** Every record of {@code rdd}, in partition order then record order (as {@code collect()}). */
    static List<byte[]> collect(JavaSparkContext jsc, JavaRDD<byte[]> rdd) {
        int n = rdd.getNumPartitions();
        byte[][][] parts = new byte[n][][];
        List<Object> indices = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            indices.add(i);
        }
        jsc.sc().runJob(rdd.rdd(), new PartitionRecords(), CollectionConverters.asScala(indices).toSeq(),
                new Store(parts), ClassTag$.MODULE$.apply(byte[][].class));
        List<byte[]> out = new ArrayList<>();
        for (byte[][] p : parts) {
            Collections.addAll(out, p);
        }
        return out;
    }

    /** In a task: the partition's records as an array. */
    static final class PartitionRecords extends AbstractFunction2<TaskContext, Iterator<byte[]>, byte[][]>
            implements Serializable {
        private static final long serialVersionUID = 1L;

        @Override
        public byte[][] apply(TaskContext context, Iterator<byte[]> records) {
            List<byte[]> out = new ArrayList<>();
            while (records.hasNext()) {
                out.add(records.next());
            }
            return out.toArray(new byte[0][]);
        }
    }

    /** On the driver: keeps each partition's result at its index. */
    private static final class Store extends AbstractFunction2<Object, byte[][], BoxedUnit> {
        private final byte[][][] parts;

        Store(byte[][][] parts) {
            this.parts = parts;
        }

        @Override
        public BoxedUnit apply(Object index, byte[][] records) {
            parts[(Integer) index] = records;
            return BoxedUnit.UNIT;
        }
    }
}
