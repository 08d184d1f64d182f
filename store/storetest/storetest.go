package storetest

import (
	"testing"

	"github.com/eventmq/emq/store"
)

// Options are the settings the suite needs a backend to honour.
type Options struct {
	// MaxJobSize is the backend's limit on a job's stored size (see
	// store.Options.MaxJobSize); 0 = the backend's default.
	MaxJobSize int
}

// Harness is what a backend gives the suite.
type Harness struct {
	// Fresh makes new, empty storage for one test (a file in t.TempDir(),
	// a new etcd key prefix) and returns its opener. Each call of the
	// opener opens that same storage again; the suite closes one journal
	// before it opens the next. Fresh registers its own cleanup.
	Fresh func(t *testing.T, o Options) (open func() (store.Journal, error))
}

// check is one conformance test: what it is called, the options its
// storage needs, and the test itself, given a journal on fresh storage.
type check struct {
	name string
	opts Options
	run  func(t *testing.T, f *fixture)
}

// checks are every conformance test, grouped as the Journal interface
// reads: appending and loading, the changes of a job's life, results,
// listing, and the promises about every write.
var checks = []check{
	{name: "AppendKeepsEveryFieldAndSetsSeq", run: appendKeepsEveryField},
	{name: "QueuesLoadInAppendOrderAcrossReopen", run: queuesLoadInAppendOrder},
	{name: "QueueNamesThatArePrefixesNeverMix", run: prefixQueuesNeverMix},
	{name: "LoadStopsAtItsCallbacksError", run: loadStopsAtError},
	{name: "PayloadsReadsEachInOrder", run: payloadsReadsEachInOrder},
	{name: "DuplicateMsgIDChangesNothing", run: duplicateChangesNothing},
	{name: "AppendsOfOneMsgIDAtOnceStoreItOnce", run: appendsAtOnceStoreOnce},
	{name: "InvalidJobIsRefused", run: invalidJobIsRefused},
	{name: "TooLargeJobIsRefusedAlone", opts: Options{MaxJobSize: 4096}, run: tooLargeIsRefusedAlone},
	{name: "ImportKeepsTheJobAsItWas", run: importKeepsTheJob},

	{name: "RecordAttemptKeepsReasonAndNotBefore", run: recordAttemptKeeps},
	{name: "BuryMovesTheJobToTheDeadLetters", run: buryMovesToDead},
	{name: "ReviveAppendsTheJobAtItsQueuesTail", run: reviveAppendsAtTail},
	{name: "CompleteDeletesTheJob", run: completeDeletes},
	{name: "RemoveDeletesInAnyState", run: removeDeletesInAnyState},
	{name: "PurgeQueueRemovesOnlyThatQueuesPendingJobs", run: purgeQueueRemovesOnlyItsPending},

	{name: "CompleteKeepsTheResultUntilItsTime", run: completeKeepsResult},
	{name: "ExpireResultsRemovesExactlyTheExpired", run: expireResultsRemovesExpired},
	{name: "KeptResultMakesAResendADuplicate", run: keptResultMakesDuplicate},
	{name: "DoneJobsAreKeptUntilTheirResultExpires", run: doneJobsAreKept},
	{name: "TrailsAreKeptAndBounded", run: trailsAreKept},

	{name: "ListPagesThroughEveryJobOnceInOrder", run: listPagesInOrder},
	{name: "ListWithoutStateGivesPendingThenDead", run: listPendingThenDead},
	{name: "ListLimitZeroMeans100", run: listLimitZero},
	{name: "ListRefusesCursorsItDidNotGive", run: listRefusesForeignCursors},
	{name: "CountsPerQueueAndState", run: countsPerQueueAndState},
	{name: "ListFiltersWithPagesAndScanBudget", run: listFilters},

	{name: "WritesApplyInTheOrderTheyWereMade", run: writesApplyInOrder},
	{name: "CloseFinishesQueuedWrites", run: closeFinishesQueuedWrites},
	{name: "WritesAfterCloseFailWithErrClosed", run: writesAfterCloseFail},
	{name: "ConcurrentWritersAndReadersLoseNothing", run: concurrentUseLosesNothing},

	{name: "PutScheduleKeepsEveryField", run: putScheduleKeepsEveryField},
	{name: "RemoveAndPauseSchedules", run: removeAndPauseSchedules},
	{name: "TooLargeScheduleIsRefused", opts: Options{MaxJobSize: 4096}, run: tooLargeScheduleIsRefused},
	{name: "FireMakesOneJobAndMovesNext", run: fireMakesOneJobAndMovesNext},
	{name: "FireEndsSchedules", run: fireEndsSchedules},
	{name: "FireTakesAnExpiredDoneMsgID", run: fireTakesAnExpiredDoneMsgID},

	{name: "UniqueKeyIsHeldWhileItsJobIsPending", run: uniqueHeldWhilePending},
	{name: "UniqueKeyIsHeldForItsHoldAfterDone", run: uniqueHeldForItsHold},
	{name: "DeadCancelledRemovedOrPurgedJobsLetTheirKeyGo", run: uniqueLetGo},
	{name: "ReviveTakesTheKeyBackWhenFree", run: uniqueRevive},
	{name: "AppendsOfOneUniqueKeyAtOnceStoreOne", run: uniqueAppendsAtOnce},
	{name: "CancelTakesAPendingJobOutForGood", run: cancelTakesOut},
	{name: "CancelledJobsAreKeptLikeDoneOnes", run: cancelledAreKept},

	{name: "WorkflowJobWaitsForEveryParent", run: workflowWaitsForEveryParent},
	{name: "WorkflowParentsMustBeKnown", run: workflowParentsMustBeKnown},
	{name: "WorkflowFailedParentsCancelOrRelease", run: workflowFailedParentsCancelOrRelease},
	{name: "WorkflowWaitingJobsCancelAndPurge", run: workflowWaitingJobsCancelAndPurge},
	{name: "WorkflowBatches", run: workflowBatches},
	{name: "WorkflowManyChildren", run: workflowManyChildren},

	{name: "BackupRestoresEverything", run: backupRestoresEverything},
	{name: "BackupRestoresLargeJobs", run: backupRestoresLargeJobs},

	{name: "QueueSettingsAreKept", run: queueSettingsAreKept},
	{name: "BadQueueSettingsAreRefused", run: badQueueSettingsAreRefused},
	{name: "TenantSettingsAreKept", run: tenantSettingsAreKept},
	{name: "BadTenantSettingsAreRefused", run: badTenantSettingsAreRefused},
	{name: "LimitersAreKept", run: limitersAreKept},

	{name: "BulkStoresEveryJobInOrder", run: bulkStoresEveryJobInOrder},
	{name: "BulkIsRefusedWhole", opts: Options{MaxJobSize: 4096}, run: bulkIsRefusedWhole},
	{name: "BulkOfManyJobs", run: bulkOfManyJobs},
	{name: "BulkAmongAppends", run: bulkAmongAppends},
	{name: "BulkWithWorkflows", run: bulkWithWorkflows},
}

// Run runs every conformance test against h, each as a parallel subtest
// on fresh storage.
func Run(t *testing.T, h Harness) {
	if h.Fresh == nil {
		t.Fatal("storetest: Harness.Fresh is nil")
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newFixture(t, h, c.opts))
		})
	}
}
