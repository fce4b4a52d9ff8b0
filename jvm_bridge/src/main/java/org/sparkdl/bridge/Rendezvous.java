package org.sparkdl.bridge;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.function.Function;

import org.apache.spark.SparkEnv;
import org.apache.spark.rpc.RpcCallContext;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.rpc.RpcEnv;
import org.apache.spark.rpc.ThreadSafeRpcEndpoint;

import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * The driver's meeting point of the gradient tasks of one multi-iteration job ({@link TrainingLoop#run}): an
 * endpoint on Spark's own RPC environment (the executors' existing connection to the driver, no new port). Each
 * task's {@link TaskLink} sends one {@link Contribution} per iteration (its gradient records); when every task
 * of the job has sent iteration j's, the driver-reduce function sums them and applies the update, and every task
 * receives the same reply (the next iteration's header and weights, or the order to stop).
 *
 * <p>A contribution for another iteration than the current one, or a second one from the same task (a retried
 * task attempt), fails the rendezvous: every waiting task and every later one receives the failure, so the job
 * fails as a whole and the driver replays it from its start (one iteration is never half-applied).
 */
final class Rendezvous implements ThreadSafeRpcEndpoint {
    /** One task's gradient records of one iteration. */
    static final class Contribution implements Serializable {
        private static final long serialVersionUID = 1L;
        final int iteration;
        final int task;
        final byte[][] records;

        Contribution(int iteration, int task, byte[][] records) {
            this.iteration = iteration;
            this.task = task;
            this.records = records;
        }
    }

    private final RpcEnv env;
    private final int tasks;
    /** The driver reduce of one iteration: every task's records in, the reply every task receives out. */
    private final Function<List<byte[]>, byte[][]> reduce;
    private final String name = "sparkdl-rendezvous-" + UUID.randomUUID();
    private final List<RpcCallContext> waiting = new ArrayList<>();
    private final List<byte[]> records = new ArrayList<>();
    private final boolean[] arrived;
    private int iteration;
    private Throwable failure;
    private RpcEndpointRef ref;

    Rendezvous(int tasks, Function<List<byte[]>, byte[][]> reduce) {
        this.env = SparkEnv.get().rpcEnv();
        this.tasks = tasks;
        this.reduce = reduce;
        this.arrived = new boolean[tasks];
    }

    /** Register on the driver's RPC environment; returns the name the tasks look it up by. */
    String open() {
        ref = env.setupEndpoint(name, this);
        return name;
    }

    /** Unregister; tasks still waiting receive a failure. */
    void close() {
        if (ref != null) {
            env.stop(ref);
            ref = null;
        }
    }

    /** Whether any task ever reached the rendezvous (a job that failed before: it could not start). */
    private boolean reached;

    synchronized boolean reached() {
        return reached;
    }

    /** The failure that ended the rendezvous (null if none). */
    synchronized Throwable failure() {
        return failure;
    }

    @Override
    public RpcEnv rpcEnv() {
        return env;
    }

    @Override
    public synchronized void onStop() {
        if (!waiting.isEmpty()) {
            fail(new IllegalStateException("sparkdl: the iteration rendezvous closed before every task arrived"));
        }
    }

    @Override
    public scala.PartialFunction<Object, BoxedUnit> receiveAndReply(RpcCallContext context) {
        return new AbstractPartialFunction<Object, BoxedUnit>() {
            @Override
            public boolean isDefinedAt(Object message) {
                return message instanceof Contribution;
            }

            @Override
            public BoxedUnit apply(Object message) {
                arrive((Contribution) message, context);
                return BoxedUnit.UNIT;
            }
        };
    }

    private synchronized void arrive(Contribution c, RpcCallContext context) {
        reached = true;
        if (failure != null) {
            context.sendFailure(failure);
            return;
        }
        if (c.task < 0 || c.task >= tasks || c.iteration != iteration || arrived[c.task]) {
            waiting.add(context);
            fail(new IllegalStateException("sparkdl: task " + c.task + " sent iteration " + c.iteration
                    + " while the job is at iteration " + iteration + (c.task >= 0 && c.task < tasks
                    && arrived[c.task] ? " (a second attempt of a task: the job is replayed from its start)" : "")));
            return;
        }
        arrived[c.task] = true;
        waiting.add(context);
        java.util.Collections.addAll(records, c.records);
        if (waiting.size() < tasks) {
            return;
        }
        byte[][] reply;
        try {
            reply = reduce.apply(records);
        } catch (RuntimeException | Error e) {
            fail(e);
            return;
        }
        for (RpcCallContext w : waiting) {
            w.reply(reply);
        }
        waiting.clear();
        records.clear();
        java.util.Arrays.fill(arrived, false);
        iteration++;
    }

    private synchronized void fail(Throwable cause) {
        if (failure == null) {
            failure = cause;
        }
        for (RpcCallContext w : waiting) {
            w.sendFailure(failure);
        }
        waiting.clear();
        records.clear();
    }
}
