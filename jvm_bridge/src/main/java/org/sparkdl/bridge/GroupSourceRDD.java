package org.sparkdl.bridge;

import java.util.ArrayList;
import java.util.Collections;

import org.apache.spark.Partition;
import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;

import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * The source of an iteration whose tasks read executor-local copies of the training partitions: one
 * partition per group of data partitions (one group per task slot of an executor), each preferring the
 * executor that holds its data partitions. A task emits only the header and the weights
 * ({@link IterationContext#frames}); it never reads the cached data.
 */
final class GroupSourceRDD extends RDD<byte[]> {
    private static final ClassTag<byte[]> BYTES = ClassTag$.MODULE$.apply(byte[].class);

    private final IterationContext context;
    /** Preferred hosts/executors of each group; driver side only. */
    private transient String[][] locations;

    GroupSourceRDD(SparkContext sc, IterationContext context, int groups) {
        super(sc, CollectionConverters.asScala(new ArrayList<org.apache.spark.Dependency<?>>()).toList(), BYTES);
        this.context = context;
        this.locations = new String[groups][0];
    }

    void setLocations(String[][] locations) {
        this.locations = locations;
    }

    @Override
    public Iterator<byte[]> compute(Partition split, TaskContext task) {
        return CollectionConverters.asScala(context.frames(split.index(), false, null));
    }

    @Override
    public Partition[] getPartitions() {
        Partition[] out = new Partition[locations.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = new Index(i);
        }
        return out;
    }

    @Override
    public Seq<String> getPreferredLocations(Partition split) {
        String[] where = locations == null ? new String[0] : locations[split.index()];
        java.util.List<String> list = new ArrayList<>();
        Collections.addAll(list, where);
        return CollectionConverters.asScala(list).toList();
    }

    static final class Index implements Partition {
        private final int index;

        Index(int index) {
            this.index = index;
        }

        @Override
        public int index() {
            return index;
        }

        @Override
        public int hashCode() {
            return index;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Index && ((Index) o).index == index;
        }
    }
}
